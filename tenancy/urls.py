from django.urls import path

from tenancy import views

app_name = "tenancy"

urlpatterns = [
    path("projects/<slug:project_slug>/changes/", views.project_changes, name="project-changes"),
]
