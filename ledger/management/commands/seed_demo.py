"""Demo data for `make run`: a project, an admin login, an agent key and a few real runs."""

import secrets
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from ledger.ingest.envelopes import check_events
from ledger.ingest.recordings import recording_ingest
from ledger.ingest.services import events_ingest
from tenancy.models import AGENT_SCOPES, Membership
from tenancy.selectors import agent_key_get_by_secret
from tenancy.services import Actor, agent_key_create, membership_grant, project_get_or_create

DEMO = Path(__file__).resolve().parents[2] / "demo"


def _remembered(path: Path, make: Any) -> str:
    """A value kept under the data directory so restarts print the same login and key."""
    if path.exists():
        return path.read_text().strip()
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)
    path.chmod(0o600)
    return value


class Command(BaseCommand):
    help = "Create the demo project, an admin login, a demo agent key, and load demo runs (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_get_or_create(slug="demo", name="Demo project")
        password = _remembered(settings.DATA_DIR / "admin-password", lambda: secrets.token_urlsafe(12))
        user_model = get_user_model()
        admin = user_model.objects.filter(username="admin").first()
        if admin is None:
            admin = user_model.objects.create_superuser("admin", "admin@localhost", password)
        # An `admin` made otherwise (createsuperuser, or a password changed since) keeps its own
        # password: print the remembered one only where it signs in.
        login = f"admin / {password}" if admin.check_password(password) else "admin (its own password, unchanged)"
        actor = Actor.command("seed_demo")
        membership_grant(user=admin, project=project, role=Membership.Role.ADMIN, actor=actor)

        key_file = settings.DATA_DIR / "demo-agent-key"
        if key_file.exists() and agent_key_get_by_secret(secret=key_file.read_text().strip()) is None:
            key_file.unlink()  # the database was reset: mint a new key
        key = _remembered(
            key_file,
            lambda: agent_key_create(project=project, scopes=AGENT_SCOPES, name="demo", actor=actor)[1],
        )

        # The last: a run paused at its four-eyes ask, which waits in the inbox for a decision.
        for name in ("middleware-events.json", "tool-effects-events.json", "middleware-paused-events.json"):
            events = orjson.loads((DEMO / name).read_bytes())["events"]
            events_ingest(project=project, events=check_events(events))
        recording_ingest(project=project, body=(DEMO / "recording.json").read_bytes())

        self.stdout.write(f"login: {login}")
        self.stdout.write(f"agent key: {key}")
