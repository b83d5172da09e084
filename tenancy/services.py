import hashlib
import secrets
import string

from django.contrib.auth.models import AbstractBaseUser
from django.core.validators import slug_re
from django.db import transaction

from tenancy.models import AgentKey, Membership, Project

KEY_PREFIX = "afk_"
_ALPHABET = string.ascii_letters + string.digits


def _random_text(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


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
def agent_key_create(*, project: Project, scopes: list[str], name: str = "") -> tuple[AgentKey, str]:
    """Mint a key. Returns the row and the secret, which is shown this once and never stored."""
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
    return key, secret


@transaction.atomic
def membership_grant(*, user: AbstractBaseUser, project: Project, role: str) -> Membership:
    """Give `user` exactly one role in `project`, replacing any earlier one."""
    if role not in Membership.Role.values:
        raise ValueError(f"role must be one of {', '.join(Membership.Role.values)}")
    membership, _ = Membership.objects.update_or_create(user=user, project=project, defaults={"role": role})
    return membership
