"""Writes of who may do what: projects, agent keys and roles. Every admin change is recorded
(`AdminChange`: who, when, before and after) in the transaction of the change itself."""

import hashlib
import secrets
import string
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.validators import slug_re
from django.db import transaction
from django.db.models.functions import Now

from tenancy.models import AdminChange, AgentKey, Membership, Project

KEY_PREFIX = "afk_"
_ALPHABET = string.ascii_letters + string.digits


def _random_text(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


@dataclass(frozen=True)
class Actor:
    """Who made an admin change: a signed-in user, or an operator at the command line."""

    user: User | None
    label: str

    @classmethod
    def of_user(cls, user: AbstractBaseUser | AnonymousUser, *, place: str = "") -> "Actor":
        if not isinstance(user, User):
            raise ValueError("An admin change needs a signed-in user; this request has none.")
        name = user.get_username()
        return cls(user=user, label=f"{name} ({place})" if place else name)

    @classmethod
    def command(cls, name: str) -> "Actor":
        return cls(user=None, label=f"command line (manage.py {name})")


# Callers that name no one (test hooks, fixtures) are still recorded, as this.
UNNAMED = Actor(user=None, label="unnamed caller")


def admin_change_record(
    *,
    actor: Actor,
    action: str,
    project: Project,
    target_type: str,
    target_id: object,
    target_label: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> AdminChange:
    """Write one AdminChange row. Called by the service making the change, inside its transaction,
    so the record commits with the change or not at all; outside a transaction it refuses."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("An admin change is recorded in the transaction of the change it records.")
    return AdminChange.objects.create(
        project=project,
        actor=actor.user,
        actor_label=actor.label[:200],
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        target_label=target_label[:200],
        before=before,
        after=after,
    )


def _key_label(key: AgentKey) -> str:
    return f"key {key.prefix}… ({key.name})" if key.name else f"key {key.prefix}…"


def hash_secret(secret: str) -> bytes:
    # Keys carry ~190 bits of randomness, so one fast SHA-256 resists guessing; no salt needed.
    return hashlib.sha256(secret.encode()).digest()


@transaction.atomic
def project_get_or_create(*, slug: str, name: str = "") -> Project:
    """The project named by `slug`, created if new. Raises ValueError for a slug the pages could
    not put in their URLs (letters, digits, '-' and '_', at most 64)."""
    max_length = Project._meta.get_field("slug").max_length or 64
    if not slug_re.match(slug) or len(slug) > max_length:
        raise ValueError(
            f"Project slug {slug[:80]!r} must be letters, digits, '-' or '_' (at most {max_length}), "
            "as it appears in page URLs: for example 'acme-prod'."
        )
    project, _ = Project.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return project


@transaction.atomic
def agent_key_create(
    *, project: Project, scopes: list[str], name: str = "", actor: Actor = UNNAMED
) -> tuple[AgentKey, str]:
    """Mint a key: writes the AgentKey row (only the secret's hash) and a KEY_MINTED AdminChange.

    Returns the row and the secret, which is shown this once and never stored. Raises ValueError
    for unknown or missing scopes and for a name longer than the column, writing nothing.
    """
    unknown = set(scopes) - set(AgentKey.Scope.values)
    if unknown or not scopes:
        raise ValueError(f"scopes must be among {', '.join(AgentKey.Scope.values)}; got {scopes}")
    max_name = AgentKey._meta.get_field("name").max_length
    if max_name is not None and len(name) > max_name:
        raise ValueError(f"A key's name is at most {max_name} characters; this one has {len(name)}.")
    prefix = _random_text(8)
    secret = f"{KEY_PREFIX}{prefix}_{_random_text(32)}"
    key = AgentKey.objects.create(
        project=project, name=name, prefix=prefix, secret_hash=hash_secret(secret), scopes=sorted(set(scopes))
    )
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.KEY_MINTED,
        project=project,
        target_type="agent key",
        target_id=key.pk,
        target_label=_key_label(key),
        before=None,
        after={"name": key.name, "scopes": key.scopes},
    )
    return key, secret


@transaction.atomic
def agent_key_revoke(*, key: AgentKey, actor: Actor = UNNAMED) -> AgentKey:
    """Revoke a key at the database's time: sets `revoked_at` and writes a KEY_REVOKED AdminChange.

    Idempotent: a key already revoked keeps its first revocation time and nothing is written. The
    revocation is claimed with a conditional UPDATE, so two revokes at once record one change.
    """
    claimed = AgentKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=Now())
    key.refresh_from_db(fields=["revoked_at"])
    if claimed:
        admin_change_record(
            actor=actor,
            action=AdminChange.Action.KEY_REVOKED,
            project=key.project,
            target_type="agent key",
            target_id=key.pk,
            target_label=_key_label(key),
            before={"revoked_at": None},
            after={"revoked_at": key.revoked_at.isoformat() if key.revoked_at else None},
        )
    return key


@transaction.atomic
def membership_grant(*, user: AbstractBaseUser, project: Project, role: str, actor: Actor = UNNAMED) -> Membership:
    """Give `user` exactly one role in `project`, replacing any earlier one.

    Writes the Membership row and a ROLE_GRANTED (new member) or ROLE_CHANGED (other role)
    AdminChange; granting the role the user already has writes nothing. Raises ValueError for an
    unknown role. The existing row is locked, so two grants at once each record what they replaced.
    """
    if role not in Membership.Role.values:
        raise ValueError(f"role must be one of {', '.join(Membership.Role.values)}")
    membership, created = Membership.objects.select_for_update().get_or_create(
        user=user, project=project, defaults={"role": role}
    )
    if not created and membership.role == role:
        return membership
    before = None if created else {"role": membership.role}
    if not created:
        membership.role = role
        membership.save(update_fields=["role"])
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.ROLE_GRANTED if created else AdminChange.Action.ROLE_CHANGED,
        project=project,
        target_type="membership",
        target_id=membership.pk,
        target_label=user.get_username(),
        before=before,
        after={"role": role},
    )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: Actor = UNNAMED) -> None:
    """Take away a user's role in a project: deletes the Membership row and writes a ROLE_REMOVED
    AdminChange. A membership already gone is a quiet no-op that writes nothing."""
    row = (
        Membership.objects.select_for_update(of=("self",))
        .filter(pk=membership.pk)
        .values_list("role", "user__username", "project_id")
        .first()
    )
    if row is None:
        return
    role, username, project_id = row
    Membership.objects.filter(pk=membership.pk).delete()
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.ROLE_REMOVED,
        project=Project(pk=project_id),
        target_type="membership",
        target_id=membership.pk,
        target_label=username,
        before={"role": role},
        after=None,
    )
