"""The admin site goes through the same services as the pages and the commands, so every change it
makes to keys and roles leaves an AdminChange; the record itself is read-only here."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from tenancy.models import AdminChange, AgentKey, Membership, Project
from tenancy.services import Actor, agent_key_revoke, membership_grant, membership_remove

ADMIN_SITE = "admin site"


def _actor(request: HttpRequest) -> Actor:
    return Actor.of_user(request.user, place=ADMIN_SITE)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin[Project]):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


class AgentKeyForm(forms.ModelForm[AgentKey]):
    revoke = forms.BooleanField(
        required=False,
        help_text="Revoke this key now (the database's time). A revoked key stays revoked.",
    )

    class Meta:
        model = AgentKey
        fields: list[str] = []


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin[AgentKey]):
    form = AgentKeyForm
    list_display = ("prefix", "project", "name", "scopes", "created_at", "revoked_at")
    fields = ("project", "name", "prefix", "scopes", "created_at", "revoked_at", "revoke")
    # What a key may do is fixed when it is minted (and recorded then); the one change is revoking.
    readonly_fields = ("project", "name", "prefix", "scopes", "created_at", "revoked_at")
    actions = ["revoke_selected"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are minted by `create_agent_key`, which shows the secret once

    def has_delete_permission(self, request: HttpRequest, obj: AgentKey | None = None) -> bool:
        return False  # a key is revoked, never deleted: its mint and revocation stay on record

    def save_model(self, request: HttpRequest, obj: AgentKey, form: Any, change: bool) -> None:
        if form.cleaned_data.get("revoke"):
            agent_key_revoke(key=obj, actor=_actor(request))

    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[AgentKey]) -> None:
        actor = _actor(request)
        with transaction.atomic():
            # In key order, so two admins revoking overlapping selections lock rows in one order.
            live = queryset.filter(revoked_at__isnull=True).select_related("project").order_by("pk")
            revoked = list(live)
            for key in revoked:
                agent_key_revoke(key=key, actor=actor)
        self.message_user(request, f"Revoked {len(revoked)} key(s).", messages.SUCCESS)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ("user", "project", "role")
    list_filter = ("role", "project")

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> tuple[str, ...]:
        # Moving a role to another user or project is a removal and a grant: do those instead.
        return ("user", "project") if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        membership = membership_grant(user=obj.user, project=obj.project, role=obj.role, actor=_actor(request))
        obj.pk = membership.pk  # the admin's redirect and its own history name the saved row

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_remove(membership=obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        actor = _actor(request)
        with transaction.atomic():
            for membership in queryset.order_by("pk"):
                membership_remove(membership=membership, actor=actor)


@admin.register(AdminChange)
class AdminChangeAdmin(admin.ModelAdmin[AdminChange]):
    """Read-only: the record is written by the services, never by hand."""

    list_display = ("created_at", "project", "actor_label", "action", "target_label")
    list_filter = ("action", "project")
    search_fields = ("actor_label", "target_label")
    list_select_related = ("project",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AdminChange | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AdminChange | None = None) -> bool:
        return False
