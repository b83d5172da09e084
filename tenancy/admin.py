from django.contrib import admin

from tenancy.models import AgentKey, Membership, Project


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
