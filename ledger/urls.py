from django.urls import path

from ledger import views

app_name = "ledger"

urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("projects/<slug:project_slug>/runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("projects/<slug:project_slug>/runs/<str:run_id>/events/", views.run_events, name="run-events"),
    path("projects/<slug:project_slug>/runs/<str:run_id>/integrity/", views.run_integrity, name="run-integrity"),
]
