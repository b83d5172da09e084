from django.contrib import admin

from ledger.models import AgentKey, Ask, Membership, Project, Run, WebhookDelivery, WebhookEndpoint


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin[Project]):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin[AgentKey]):
    list_display = ("prefix", "project", "name", "scopes", "created_at", "revoked_at")
    fields = ("project", "name", "prefix", "scopes", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")

    def has_add_permission(self, request: object) -> bool:
        return False  # keys are minted by `create_agent_key`, which shows the secret once


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ("user", "project", "role")
    list_filter = ("role", "project")


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = ("run_id", "project", "status", "event_count", "first_event_at")
    list_filter = ("status", "project")
    search_fields = ("run_id", "session_id")

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False  # the ledger is append-only, even for staff

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False  # a run takes its chain along: evidence stays (and so a project holding runs)


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin[WebhookEndpoint]):
    list_display = ("project", "url", "active")
    exclude = ("secret",)  # set by `manage.py set_webhook`, which prints it once

    def has_add_permission(self, request: object) -> bool:
        return False  # an endpoint added here would have no signing secret: `manage.py set_webhook`


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin[WebhookDelivery]):
    list_display = ("ask", "url", "status", "attempts", "created_at", "delivered_at")
    list_filter = ("status",)


@admin.register(Ask)
class AskAdmin(admin.ModelAdmin[Ask]):
    list_display = ("pk", "project", "kind", "tool_name", "status", "decided_by_label", "created_at")
    list_filter = ("status", "kind", "project")
    exclude = ("checkpoint",)  # the run's whole state: only the agent key that posted it reads it

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False  # decisions are made on the ask page, exactly once

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False  # an ask holds a decision of record
