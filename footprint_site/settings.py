"""One settings module, driven by the environment (see .env.example)."""

from pathlib import Path
from typing import Any

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

from footprint_site.compiled import refuse_stale_copies

django_stubs_ext.monkeypatch()
refuse_stale_copies()


class _Environment(environ.Env):
    """django-environ, except that a value which cannot be read as the type asked for stops
    start-up with a sentence naming the variable, not a bare ValueError; and that a variable set
    empty means its default (docker compose's env_file sets one left empty in .env to "")."""

    def get_value(
        self, var: str, cast: Any = None, default: Any = environ.Env.NOTSET, parse_default: bool = False
    ) -> Any:
        if default is not environ.Env.NOTSET and self.ENVIRON.get(var) == "":
            return self.parse_value(default, cast) if parse_default else default
        try:
            return super().get_value(var, cast=cast, default=default, parse_default=parse_default)
        except ValueError:
            kind = getattr(cast, "__name__", "value")
            raise ImproperlyConfigured(
                f"{var}={self.ENVIRON.get(var, '')!r} is not a valid {kind}: fix or unset it."
            ) from None


env = _Environment()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env.str("FOOTPRINT_DATA_DIR", default=str(BASE_DIR / ".data")))

DEBUG = env.bool("DJANGO_DEBUG", default=False)
# `make run` keeps the key it made in DATA_DIR, so manage.py commands beside it find it too.
_SECRET_KEY_FILE = DATA_DIR / "secret-key"
_KEPT_SECRET_KEY = _SECRET_KEY_FILE.read_text().strip() if _SECRET_KEY_FILE.is_file() else ""
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default=_KEPT_SECRET_KEY or ("dev-only-insecure" if DEBUG else ""))
if not SECRET_KEY:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off")
# Earlier copies of .env.example held a public placeholder; it signs sessions and chain anchors.
if not DEBUG and SECRET_KEY.startswith("change-me"):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is still the placeholder of .env.example: set a long random one, e.g. "
        "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django.contrib.humanize",  # naturaltime: "4 minutes ago"
    "django_htmx",
    "template_partials",
    "ninja",
    "tenancy",
    "ledger",
    "artifacts",
]

MIDDLEWARE = [
    "footprint_site.health.HealthzFirstMiddleware",  # first: probes ask by IP, over plain HTTP
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "footprint_site.middleware.RequestHygieneMiddleware",
    "footprint_site.middleware.DatabaseUnavailableMiddleware",
    # Sessions, the user, messages and htmx for pages only: the API passes through them.
    "footprint_site.page_middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",  # Django's own: `check --deploy` looks for it by name
    "footprint_site.page_middleware.AuthenticationMiddleware",
    "footprint_site.page_middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "footprint_site.page_middleware.HtmxMiddleware",
    "footprint_site.page_middleware.HtmxLoginRedirectMiddleware",  # after HtmxMiddleware: reads request.htmx
    "footprint_site.middleware.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "footprint_site.urls"
WSGI_APPLICATION = "footprint_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "ledger.context_processors.inbox",
                "footprint_site.replicas.read_from",
            ],
            "builtins": ["template_partials.templatetags.partials", "footprint_site.templatetags.people"],
        },
    },
]


# Set when DATABASE_URL is a transaction-pooling PgBouncer: PostgreSQL itself, for what must keep
# one server session (LISTEN, session advisory locks: footprint_site/lib/db.session_connection).
_BEHIND_A_POOLER = bool(env.str("DATABASE_DIRECT_URL", default=""))


def _database_from_environment() -> dict[str, object]:
    """DATABASE_URL when set; otherwise the embedded PostgreSQL under DATA_DIR (started on demand)."""
    if env.str("DATABASE_URL", default=""):
        config: dict[str, object] = env.db("DATABASE_URL")
    else:
        from footprint_site.embedded_postgres import embedded_database_settings

        config = embedded_database_settings(DATA_DIR / "postgres")
    config.setdefault("TEST", {"NAME": f"test_{config['NAME']}"})
    return _with_connection_options(config, pooled=True)


def _with_connection_options(config: dict[str, object], *, pooled: bool = False) -> dict[str, object]:
    config["ENGINE"] = "footprint_site.postgresql"  # Django's, with a health check without a round trip
    config["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    config["CONN_HEALTH_CHECKS"] = True
    # Django turns psycopg's prepared statements off; ingestion's and the artifact reads'
    # server-side-binding statements run on every request, and parsing and planning them anew was
    # a fifth of PostgreSQL's work outside ingestion's COPYs (and most of an artifact get's).
    # Django's own client-side-binding cursors never prepare, whatever this says. Prepared
    # statements live in a server session, which a transaction-pooling PgBouncer before 1.21 does
    # not keep for a client: off by default behind one.
    threshold = env.str("DATABASE_PREPARE_THRESHOLD", default="off" if _BEHIND_A_POOLER else "5")
    if threshold != "off" and not threshold.isdigit():
        raise ImproperlyConfigured(
            f"DATABASE_PREPARE_THRESHOLD={threshold!r}: give a number of runs (0 or more) after which a "
            "statement is prepared, or 'off'."
        )
    options: dict[str, object] = config.setdefault("OPTIONS", {})  # type: ignore[assignment]
    options["prepare_threshold"] = None if threshold == "off" else int(threshold)
    # No JIT: every query here is short, and a cost estimate the planner cannot make well (runs
    # whose chain_length passes search_indexed) made it spend 420 ms compiling a 4 ms search.
    # PgBouncer passes no `options` on: behind one, `ALTER DATABASE … SET jit = off` does it.
    if not (pooled and _BEHIND_A_POOLER):
        options["options"] = f"{options.get('options', '')} -c jit=off".strip()
    return config


DATABASES = {"default": _database_from_environment()}
if _BEHIND_A_POOLER:
    # A named cursor lives across the transaction's statements only within one server session.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["direct"] = _with_connection_options({**env.db("DATABASE_DIRECT_URL"), "TEST": {"MIRROR": "default"}})
# A streaming replica of the primary for the pages' reads that may lag (footprint_site/replicas.py):
# used while it is less than DATABASE_REPLICA_MAX_LAG seconds behind, else the primary serves.
if env.str("DATABASE_REPLICA_URL", default=""):
    DATABASES["replica"] = _with_connection_options({**env.db("DATABASE_REPLICA_URL"), "TEST": {"MIRROR": "default"}})
    DATABASE_ROUTERS = ["footprint_site.replicas.ReplicaRouter"]
DATABASE_REPLICA_MAX_LAG = env.float("DATABASE_REPLICA_MAX_LAG", default=30.0)
if DATABASE_REPLICA_MAX_LAG <= 0:
    raise ImproperlyConfigured(
        f"DATABASE_REPLICA_MAX_LAG={DATABASE_REPLICA_MAX_LAG}: give the seconds a replica may be behind (above 0)."
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "ledger:run-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Security headers; cookies are secure whenever the site is served over HTTPS.
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "footprint_site.errors.csrf_failure"  # the 403 page, with what to do next
# Served over HTTPS (directly or behind a proxy that sets X-Forwarded-Proto): secure cookies,
# redirects to https and HSTS. `make run` and the tests serve plain HTTP on loopback and turn it off.
HTTPS = env.bool("DJANGO_HTTPS", default=not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=True)
# The directive only allows a submission to the browsers' preload list; the operator decides that.
SECURE_HSTS_PRELOAD = env.bool("DJANGO_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = ["security.W021"]  # check --deploy asks for preload: see above
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The proxies' own addresses: failed keys and sign-ins are then counted per client (X-Forwarded-For),
# not all against the proxy, whose 429 would shut every agent and person out at once.
FOOTPRINT_TRUSTED_PROXIES = frozenset(env.list("FOOTPRINT_TRUSTED_PROXIES", default=[]))

# Celery: Redis when a broker URL is given, otherwise a file-system transport that needs no server.
_broker_url = env.str("CELERY_BROKER_URL", default="") or env.str("REDIS_URL", default="")
if _broker_url:
    CELERY_BROKER_URL = _broker_url
else:
    _broker_dir = DATA_DIR / "broker"
    for _sub in ("out", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://localhost//"  # the host is ignored; without one kombu warns in every process
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "data_folder_processed": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
    }
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_TIME_LIMIT = 15 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 14 * 60
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")


def _every(seconds: float, task: str) -> dict[str, object]:
    # A pass still queued when the next is due is dropped (expires): after a worker outage the
    # passes run once, not once per missed period back to back.
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "asks-deadlines": _every(5.0, "ledger.tasks.asks_apply_deadlines"),
    "webhooks-outbox": _every(10.0, "ledger.tasks.webhooks_send_due"),
    "search-index": _every(
        env.float("FOOTPRINT_SEARCH_INDEX_EVERY_SECONDS", default=5.0), "ledger.tasks.search_index_pending"
    ),
    # The overview's figures are at most this old, plus one pass (docs/operations.md).
    "rollups": _every(env.float("FOOTPRINT_ROLLUPS_EVERY_SECONDS", default=20.0), "ledger.tasks.rollups_fold_pending"),
    "span-index": _every(
        env.float("FOOTPRINT_SPAN_INDEX_EVERY_SECONDS", default=5.0), "ledger.tasks.run_spans_index_pending"
    ),
    "chain-anchors": _every(
        env.float("FOOTPRINT_ANCHOR_EVERY_SECONDS", default=300.0), "ledger.tasks.chain_anchors_write"
    ),
    "runs-retention": _every(
        env.float("FOOTPRINT_RETENTION_EVERY_SECONDS", default=3600.0), "ledger.tasks.runs_retention_pass"
    ),
    # The ledger's monthly partitions, created MONTHS_AHEAD ahead (ledger/partitions.py).
    "ledger-partitions": _every(3600.0, "ledger.tasks.ledger_partitions_ensure"),
    "artifacts-sweep": _every(
        env.float("FOOTPRINT_SWEEP_EVERY_SECONDS", default=60.0), "artifacts.tasks.artifacts_sweep"
    ),
    "asks-escalations": _every(5.0, "ledger.tasks.escalations_run"),
    "notifications-outbox": _every(10.0, "ledger.tasks.notifications_send_due"),
}

# Where retention writes the archives of the runs it removes (ledger/retention/archive.py).
ARCHIVE_URL = env.str("ARCHIVE_URL", default=(DATA_DIR / "archive").resolve().as_uri())

# Chain anchors: every period each project's changed chain heads are signed with this key, kept
# out of the database (defaults to SECRET_KEY; set its own to rotate them apart).
FOOTPRINT_ANCHOR_KEY = env.str("FOOTPRINT_ANCHOR_KEY", default=SECRET_KEY)
# Integrity re-checks of chains up to this many records answer at once; longer ones run in Celery.
FOOTPRINT_INLINE_VERIFY_MAX_RECORDS = env.int("FOOTPRINT_INLINE_VERIFY_MAX_RECORDS", default=10_000)
# Ask long-polls a web process holds at once (ledger.asks.waits.WaitSlots); unset: under
# gunicorn its threads less one, elsewhere (runserver, tests) no limit.
_ASK_WAITS = env.str("FOOTPRINT_ASK_WAITS_PER_PROCESS", default="")  # docker compose passes "" for unset
FOOTPRINT_ASK_WAITS_PER_PROCESS: int | None = int(_ASK_WAITS) if _ASK_WAITS else None

# Ingestion limits, stated in every 413 answer.
FOOTPRINT_MAX_EVENTS_PER_REQUEST = env.int("FOOTPRINT_MAX_EVENTS_PER_REQUEST", default=5_000)
FOOTPRINT_MAX_REQUEST_BYTES = env.int("FOOTPRINT_MAX_REQUEST_BYTES", default=8 * 1024 * 1024)
FOOTPRINT_MAX_RECORDING_BYTES = env.int("FOOTPRINT_MAX_RECORDING_BYTES", default=32 * 1024 * 1024)
FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES = env.int("FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES", default=16 * 1024 * 1024)
# Test-only HTTP hooks (fresh stores, clock, corruption) for the conformance battery. Never in production.
FOOTPRINT_TEST_HOOKS = env.bool("FOOTPRINT_TEST_HOOKS", default=False)
# Django refuses bodies above this before our own limits can answer with a sentence; keep it larger.
DATA_UPLOAD_MAX_MEMORY_SIZE = (
    max(FOOTPRINT_MAX_REQUEST_BYTES, FOOTPRINT_MAX_RECORDING_BYTES, FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES) + 1024 * 1024
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}

# Notifications of asks (ledger.asks.notifications): email through Django's SMTP backend, links
# to the ask's page under FOOTPRINT_PUBLIC_URL; webhook channels are https, or http to a host
# the administrator lists here.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="footprint@localhost")
FOOTPRINT_PUBLIC_URL = env.str("FOOTPRINT_PUBLIC_URL", default="http://127.0.0.1:8000")
FOOTPRINT_NOTIFY_HTTP_HOSTS = env.list("FOOTPRINT_NOTIFY_HTTP_HOSTS", default=[])
# The outbox sweep sends at most this many notifications a second (0: no limit), resting between
# its batches, so a backlog drains without taking a core from ingestion.
FOOTPRINT_NOTIFICATIONS_PER_SECOND = env.int("FOOTPRINT_NOTIFICATIONS_PER_SECOND", default=50)
# The Celery worker's CPU priority below the web server's (nice, 0 to 19): on a machine that runs
# both, the kernel serves ingestion's answers first when both want the CPU, and the worker's work
# (an outbox, sweeps, indexes) waits milliseconds. 0 keeps the priority it was started with.
FOOTPRINT_WORKER_NICENESS = env.int("FOOTPRINT_WORKER_NICENESS", default=10)
if not 0 <= FOOTPRINT_WORKER_NICENESS <= 19:
    raise ImproperlyConfigured(
        f"FOOTPRINT_WORKER_NICENESS={FOOTPRINT_WORKER_NICENESS}: give how far below the web server's the"
        " worker's CPU priority is, from 0 (the same) to 19 (the lowest)."
    )
# An ask is announced as nearing its deadline this long before it.
FOOTPRINT_DEADLINE_WARNING_MINUTES = env.int("FOOTPRINT_DEADLINE_WARNING_MINUTES", default=5)
