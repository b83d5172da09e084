from django.urls import path

from ledger.asks import notification_views, views

app_name = "asks"

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("asks/<int:ask_id>/", views.ask_detail, name="ask-detail"),
    path("asks/<int:ask_id>/decide/", views.ask_decide, name="ask-decide"),
]

# Being told of asks (ledger/asks/notification_views.py), and the nav badge's live count.
urlpatterns += [
    path(
        "projects/<slug:project_slug>/notifications/",
        notification_views.project_notifications,
        name="project-notifications",
    ),
    path("settings/notifications/", notification_views.notification_settings, name="notification-settings"),
    path("inbox/count/", views.inbox_badge, name="inbox-count"),
]
