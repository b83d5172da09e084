"""Services queue tasks by their registered name (footprint_site.celery.task_send_on_commit), and
the beat schedule names them too: every such name must be a task the worker knows."""

import re
from pathlib import Path

from django.conf import settings

from footprint_site.celery import app

ROOT = Path(__file__).resolve().parent.parent
SENT = re.compile(r'task_send_on_commit\(\s*"([^"]+)"')


def _registered() -> set[str]:
    app.loader.import_default_modules()  # what a worker imports at start: every app's tasks module
    return set(app.tasks)


def test_every_task_a_service_queues_is_registered() -> None:
    sources = [
        p for app_dir in ("ledger", "artifacts", "tenancy", "footprint_site") for p in (ROOT / app_dir).rglob("*.py")
    ]
    sent = {name for path in sources for name in SENT.findall(path.read_text())}
    assert sent, "no service queues a task by name: the pattern no longer matches the code"
    assert sent <= _registered(), f"queued by name but not registered: {sorted(sent - _registered())}"


def test_every_scheduled_task_is_registered() -> None:
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled <= _registered(), f"scheduled but not registered: {sorted(scheduled - _registered())}"
