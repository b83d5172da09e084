import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")

app = Celery("footprint_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
