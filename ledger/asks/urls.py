from django.urls import path

from ledger.asks import approver_views, notification_views, views

app_name = "asks"

APPROVERS = "projects/<slug:project_slug>/approvers/"
STANDING = "projects/<slug:project_slug>/standing-approvals/"

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("asks/", views.ask_list, name="ask-list"),
    path("asks/<int:ask_id>/", views.ask_detail, name="ask-detail"),
    path("asks/<int:ask_id>/decide/", views.ask_decide, name="ask-decide"),
    path("asks/<int:ask_id>/standing/", approver_views.standing_grant, name="standing-grant"),
    path(APPROVERS, approver_views.approvers_page, name="approvers"),
    path(APPROVERS + "groups/", approver_views.approver_group_create, name="approver-group-create"),
    path(APPROVERS + "groups/<int:group_id>/members/", approver_views.approver_member_add, name="approver-member-add"),
    path(
        APPROVERS + "groups/<int:group_id>/members/<int:user_id>/remove/",
        approver_views.approver_member_remove,
        name="approver-member-remove",
    ),
    path(APPROVERS + "rules/", approver_views.approval_rule_create, name="approval-rule-create"),
    path(APPROVERS + "rules/<int:rule_id>/remove/", approver_views.approval_rule_remove, name="approval-rule-remove"),
    path(APPROVERS + "standing-limits/", approver_views.standing_limits, name="standing-limits"),
    path(STANDING, approver_views.standing_approvals, name="standing-approvals"),
    path(STANDING + "<int:standing_id>/revoke/", approver_views.standing_revoke, name="standing-revoke"),
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
