"""Reads of who may do what: an agent key by its secret, the projects a person sees and their role in each.

Every page and API read scopes its rows through these: a project a person is not a member of
answers as if it did not exist.
"""

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from footprint_site.pagination import Page, keyset_page
from tenancy.models import DECIDING_ROLES, AdminChange, AgentKey, Membership, Project
from tenancy.services import hash_secret


def agent_key_get_by_secret(*, secret: str) -> AgentKey | None:
    return (
        AgentKey.objects.select_related("project")
        .filter(secret_hash=hash_secret(secret), revoked_at__isnull=True)
        .first()
    )


def agent_key_person(*, key: AgentKey) -> User | None:
    """The person a key acts for: whoever minted it, as its `key_minted` admin change names them
    (None for a key minted at the command line without one)."""
    minted = (
        AdminChange.objects.filter(
            project_id=key.project_id, action=AdminChange.Action.KEY_MINTED, target_id=str(key.pk)
        )
        .select_related("actor")
        .first()
    )
    return minted.actor if minted is not None else None


def projects_for_user(user: User | AnonymousUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def project_get_for_user(*, user: User | AnonymousUser, slug: str) -> tuple[Project, str] | None:
    """The project and the user's role in it, or None when the user may not see it (a 404)."""
    project = projects_for_user(user).filter(slug=slug).first()
    if project is None:
        return None
    role = role_of(user=user, project=project)
    return (project, role) if role else None


def role_of(*, user: User | AnonymousUser, project: Project) -> str | None:
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Membership.Role.ADMIN
    return Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()


def approver_projects(user: User | AnonymousUser) -> QuerySet[Project]:
    """Projects whose asks this user may decide: approvers and admins (superusers: all)."""
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user, memberships__role__in=DECIDING_ROLES)


def admin_change_list_for_project(*, project: Project, cursor: str | None, limit: int) -> Page[AdminChange]:
    """A page of the project's admin changes, newest first. Scoped by the project alone: callers
    check the role."""
    return keyset_page(AdminChange.objects.filter(project=project), order="-pk", cursor=cursor, limit=limit)
