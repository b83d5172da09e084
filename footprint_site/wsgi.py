import os
from importlib import import_module

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")

application = get_wsgi_application()
# Django imports the URLconf (the API's routers and their pydantic models: ~250 ms) on the first
# request. gunicorn preloads this module in its master, so importing it here does that once
# before the fork, shared by every worker, instead of in each worker's first request.
import_module(settings.ROOT_URLCONF)
