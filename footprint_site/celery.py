import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import worker_init
from django.conf import settings
from django.db import transaction

# As root (containers, this machine's services) the worker warns at every start. Its danger is
# pickle, which Celery refuses to run as root anyway; CELERY_ACCEPT_CONTENT takes JSON only.
warnings.filterwarnings("ignore", message="You're running the worker with superuser", category=SecurityWarning)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")

app = Celery("footprint_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def worker_priority_lower(**_: object) -> None:
    """Lower the worker's CPU priority by FOOTPRINT_WORKER_NICENESS, before its pool's processes
    are started: they inherit it. Its PostgreSQL sessions keep the server's priority."""
    if settings.FOOTPRINT_WORKER_NICENESS:
        os.nice(settings.FOOTPRINT_WORKER_NICENESS)


def task_send_on_commit(name: str, *args: object) -> None:
    """Queue the task registered as `name` once the current transaction commits. Services name
    the tasks they queue instead of importing them: a task module imports the services it wraps,
    and the other way round would make a circle. A broker that is down does not undo the write
    (robust: the failure is logged); the work stays visible as not done (an outbox row its sweep
    retries, an integrity check shown as queued)."""
    transaction.on_commit(lambda: app.send_task(name, args=args), robust=True)
