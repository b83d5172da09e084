import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning

# As root (containers, this machine's services) the worker warns at every start. Its danger is
# pickle, which Celery refuses to run as root anyway; CELERY_ACCEPT_CONTENT takes JSON only.
warnings.filterwarnings("ignore", message="You're running the worker with superuser", category=SecurityWarning)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")

app = Celery("footprint_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
