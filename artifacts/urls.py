from django.urls import path

from artifacts import views

app_name = "artifacts"

urlpatterns = [
    path("projects/<slug:project_slug>/artifacts/", views.artifact_list, name="artifact-list"),
    path("projects/<slug:project_slug>/artifacts/retention/", views.retention_edit, name="retention"),
    path("projects/<slug:project_slug>/artifacts/<str:ref>/", views.artifact_detail, name="artifact-detail"),
    path("projects/<slug:project_slug>/artifacts/<str:ref>/download/", views.artifact_download, name="download"),
    path("projects/<slug:project_slug>/artifacts/<str:ref>/hold/", views.artifact_hold, name="hold"),
    path(
        "projects/<slug:project_slug>/artifacts/<str:ref>/holds/<int:hold_id>/release/",
        views.artifact_hold_release,
        name="hold-release",
    ),
]
