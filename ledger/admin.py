from typing import Any

from django.contrib import admin

from ledger.models import Ask, Run, WebhookDelivery, WebhookEndpoint


class EvidenceAdmin(admin.ModelAdmin[Any]):
    """Evidence is listed and read here, never made, edited or removed, even by staff: runs come
    from their agents, asks from their pauses, decisions from the ask page, exactly once."""

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False  # a run takes its chain along (and so a project holding runs stays too)


@admin.register(Run)
class RunAdmin(EvidenceAdmin):
    list_display = ("run_id", "project", "status", "event_count", "first_event_at")
    list_filter = ("status", "project")
    search_fields = ("run_id", "session_id")


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
class AskAdmin(EvidenceAdmin):
    list_display = ("pk", "project", "kind", "tool_name", "status", "decided_by_label", "created_at")
    list_filter = ("status", "kind", "project")
    # The checkpoint is the run's whole state, for the agent key that posted it alone; the pause as
    # sent may hold a consent's authorization URL, for the session's owner alone (spec §9.3).
    exclude = ("checkpoint", "pause_data")
