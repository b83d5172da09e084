from django.urls import path

from ledger.retention import views

app_name = "retention"

RUN = "projects/<slug:project_slug>/runs/<str:run_id>/"

urlpatterns = [
    path(RUN + "removed/", views.removed_run, name="removed-run"),
    path(RUN + "holds/", views.run_hold, name="run-hold"),
    path(RUN + "holds/<int:hold_id>/release/", views.run_hold_release, name="run-hold-release"),
    path("projects/<slug:project_slug>/run-retention/", views.run_retention_edit, name="run-retention"),
]
