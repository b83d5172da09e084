from django.urls import path

from ledger.explorer import views

app_name = "ledger"

RUN = "projects/<slug:project_slug>/runs/<str:run_id>/"

urlpatterns = [
    path("runs/", views.run_list, name="run-list"),
    path("projects/<slug:project_slug>/anchors/", views.project_anchors, name="project-anchors"),
    path(RUN, views.run_detail, name="run-detail"),
    path(RUN + "tab/<slug:tab>/", views.run_detail, name="run-tab"),
    path(RUN + "events/", views.run_events, name="run-events"),
    path(RUN + "events/<int:position>/", views.run_event, name="run-event"),
    path(RUN + "tool-calls/", views.run_dispatches, name="run-dispatches"),
    path(RUN + "integrity/", views.run_integrity, name="run-integrity"),
]
