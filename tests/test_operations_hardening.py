"""Operations that must refuse cleanly or not leave a hole: management commands' bad arguments,
the admin's webhook form, a placeholder secret key, the OpenAPI docs naming each operation's key
scope, throttled sign-ins, and beat passes that do not pile up behind a stopped worker."""

import os
import re
import runpy
import secrets
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from ledger.models import Ask, Run, WebhookEndpoint
from tenancy.models import AgentKey, Project

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def _call(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- management commands ---------------------------------------------------------------------------


def test_create_agent_key_too_long_name_is_a_command_error_and_creates_no_project() -> None:
    """`--name` longer than AgentKey.name's 200 characters is a CommandError, and the project the
    command would have created for the key is not left behind."""
    with pytest.raises(CommandError, match="at most 200 characters"):
        _call("create_agent_key", "--project", "fresh-project", "--name", "n" * 201)
    assert not Project.objects.filter(slug="fresh-project").exists()
    assert not AgentKey.objects.exists()


@pytest.mark.parametrize(
    "url",
    ["https://", "https://exa mple.com/hook", "https://example.com/" + "a" * 600],
    ids=["no-host", "space-in-host", "longer-than-500"],
)
def test_set_webhook_refuses_a_url_the_endpoint_cannot_hold(project: Project, url: str) -> None:
    """A URL without a host, with a space, or longer than the endpoint holds (500) would fail every
    delivery or the INSERT: a CommandError, nothing stored."""
    with pytest.raises(CommandError, match="--url"):
        _call("set_webhook", "--project", "acme", "--url", url)
    assert not WebhookEndpoint.objects.exists()


def test_seed_demo_prints_a_login_that_works_when_an_admin_user_already_exists(
    settings: Any, tmp_path: Path, django_user_model: Any, client: Client
) -> None:
    """An `admin` made otherwise (createsuperuser) keeps its password: seed_demo prints a login
    only when it signs in."""
    django_user_model.objects.create_superuser("admin", "admin@example.com", "operator-chose-this")
    settings.DATA_DIR = tmp_path
    out, _ = _call("seed_demo")
    printed = re.search(r"^login: admin / (\S+)$", out, re.M)
    if printed is not None:
        assert client.login(username="admin", password=printed.group(1)), out


# --- Django admin ----------------------------------------------------------------------------------


def test_admin_cannot_create_a_webhook_endpoint_without_a_signing_secret(
    django_user_model: Any, project: Project
) -> None:
    """An endpoint added in the admin would have an empty signing secret (anyone could forge its
    HMAC): endpoints are added by `set_webhook`, which mints the secret."""
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    client = Client()
    client.force_login(staff)
    client.post(
        "/admin/ledger/webhookendpoint/add/",
        {"project": project.pk, "url": "https://hooks.example.com/decisions", "active": "on"},
    )
    secrets = list(WebhookEndpoint.objects.values_list("secret", flat=True))
    assert all(len(secret) >= 32 for secret in secrets), f"endpoint saved with signing secret {secrets!r}"


def test_admin_cannot_delete_a_run_or_an_ask(django_user_model: Any, project: Project, agent_client: Any) -> None:
    """A run's chain and an ask's decision are evidence: not even staff removes them (a deleted run
    takes its chain along, and verify has nothing left to name)."""
    event = {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": "run-kept"}}
    assert agent_client.ingest([event]).status_code == 200
    run = Run.objects.get(run_id="run-kept")
    ask = Ask.objects.create(project=project, run_id="run-kept", tool_call_id="c1", kind="plain", pause_data={})
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    client = Client()
    client.force_login(staff)

    for path in (f"/admin/ledger/run/{run.pk}/delete/", f"/admin/ledger/ask/{ask.pk}/delete/"):
        assert client.post(path, {"post": "yes"}).status_code == 403, path
    bulk = {"action": "delete_selected", "_selected_action": [run.pk], "post": "yes"}
    client.post("/admin/ledger/run/", bulk)

    assert Run.objects.filter(pk=run.pk).exists()
    assert Ask.objects.filter(pk=ask.pk).exists()


def test_admin_cannot_add_a_run_or_an_ask(django_user_model: Any, project: Project) -> None:
    """A run nobody posted, with whatever figures were typed, would sit beside the real ones."""
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    client = Client()
    client.force_login(staff)

    for path in ("/admin/ledger/run/add/", "/admin/ledger/ask/add/"):
        assert client.get(path).status_code == 403, path
        assert client.post(path, {"project": project.pk, "run_id": "forged"}).status_code == 403, path

    assert not Run.objects.exists()
    assert not Ask.objects.exists()


def test_admin_shows_an_ask_but_neither_its_checkpoint_nor_its_consent_url(
    django_user_model: Any, agent_client: Any
) -> None:
    """Spec §9.3: a consent's authorizationUrl (its state token) is for the session's owner alone."""
    pause_data = {
        "toolCallId": "k1",
        "toolName": "read_mail",
        "question": "Authorize access to 'gmail' so 'read_mail' can run.",
        "authorization": {"service": "gmail", "authorizationUrl": "https://auth.example/o?state=SECRET-7f3a"},
    }
    created = agent_client.post_json(
        "/api/v1/asks", {"runId": "run-k", "pauseData": pause_data, "checkpoint": {"note": "CHECKPOINT-9c2e"}}
    )
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    client = Client()
    client.force_login(staff)

    page = client.get(f"/admin/ledger/ask/{created.json()['ask']['id']}/change/")

    assert page.status_code == 200
    assert b"read_mail" in page.content
    assert b"SECRET-7f3a" not in page.content
    assert b"CHECKPOINT-9c2e" not in page.content


# --- settings --------------------------------------------------------------------------------------


def _settings_start(
    tmp_path: Path,
    secret_key: str | None,
    code: str = "import django; django.setup(); print('started')",
    **settings_environment: str,
) -> subprocess.CompletedProcess[str]:
    """Production settings (DEBUG off) in a fresh interpreter, DATA_DIR at `tmp_path`, and
    `settings_environment`; no DJANGO_SECRET_KEY at all when `secret_key` is None."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "FOOTPRINT_"))}
    environment.update(
        DJANGO_SETTINGS_MODULE="footprint_site.settings",
        DJANGO_DEBUG="0",
        FOOTPRINT_DATA_DIR=str(tmp_path),
        **settings_environment,
    )
    if secret_key is not None:
        environment["DJANGO_SECRET_KEY"] = secret_key
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "secret_key",
    [
        re.search(r"^DJANGO_SECRET_KEY=(.*)$", (ROOT / ".env.example").read_text(), re.M).group(1),  # type: ignore[union-attr]
        "change-me-to-a-long-random-string",  # what earlier copies of .env.example held
    ],
    ids=["env-example-now", "earlier-placeholder"],
)
def test_production_settings_refuse_a_secret_key_copied_from_env_example(tmp_path: Path, secret_key: str) -> None:
    """Docker compose reads .env, copied from .env.example. A public key there would sign sessions
    and, through FOOTPRINT_ANCHOR_KEY's default, the chain anchors: start-up stops, naming
    DJANGO_SECRET_KEY, until a key of one's own is set."""
    result = _settings_start(tmp_path, secret_key)

    assert result.returncode != 0, result.stdout
    assert "DJANGO_SECRET_KEY" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("niceness", ["-5", "20"])
def test_settings_refuse_a_worker_niceness_out_of_range(tmp_path: Path, niceness: str) -> None:
    result = _settings_start(tmp_path, secrets.token_urlsafe(50), FOOTPRINT_WORKER_NICENESS=niceness)

    assert result.returncode != 0, result.stdout
    assert f"FOOTPRINT_WORKER_NICENESS={niceness}: give how far below" in result.stderr, result.stderr[-2000:]


def test_the_wsgi_module_imports_the_api_before_the_fork_and_opens_no_database_connection(tmp_path: Path) -> None:
    """gunicorn preloads footprint_site.wsgi in its master: the URLconf imported there is not paid
    again by every worker's first request, and a connection opened there would be shared by all."""
    code = (
        "import sys, footprint_site.wsgi; from django.db import connections; "
        "print('ledger.ingest.api' in sys.modules, [c.alias for c in connections.all() if c.connection is not None])"
    )
    result = _settings_start(tmp_path, "a-long-random-key-of-this-test-only-" * 2, code)

    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "True []"


# --- OpenAPI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("post", "/api/v1/events", "ingest"),
        ("get", "/api/v1/runs", "read"),
        ("post", "/api/v1/asks", "asks"),
        ("post", "/api/v1/artifacts", "artifacts"),
    ],
)
def test_openapi_says_which_scope_each_operation_needs(client: Client, method: str, path: str, scope: str) -> None:
    """A client reading /api/v1/docs learns which scope each operation's key needs from the
    security scheme the operation references, not from a 403."""
    document = client.get("/api/v1/openapi.json").json()
    operation = document["paths"][path][method]
    schemes = document.get("components", {}).get("securitySchemes", {})
    referenced = [name for requirement in operation.get("security", []) for name in requirement]
    text = " ".join(
        [operation.get("summary", ""), operation.get("description", "") or ""]
        + [f"{name} {schemes.get(name, {}).get('description', '')}" for name in referenced]
    )
    assert re.search(rf"\b{scope}\b", text), f"{method.upper()} {path}: nothing names scope '{scope}': {text!r}"


# --- sign-in ---------------------------------------------------------------------------------------


def test_failed_sign_ins_are_throttled_like_failed_keys(django_user_model: Any) -> None:
    """People's passwords are far weaker than keys' 190 bits: after 30 failed sign-ins in a minute
    an address is refused (429 with Retry-After, a sentence on the page), even the right password."""
    django_user_model.objects.create_user(username="dana", password="correct-horse-battery")
    client = Client()
    statuses = [
        client.post("/accounts/login/", {"username": "dana", "password": f"guess-{i}"}).status_code for i in range(31)
    ]
    assert statuses[:30] == [200] * 30
    assert statuses[-1] == 429, f"the 31st failed sign-in answered {statuses[-1]}"
    refused = client.post("/accounts/login/", {"username": "dana", "password": "correct-horse-battery"})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_behind_a_trusted_proxy_failures_are_counted_per_client_not_against_the_proxy(
    django_user_model: Any, settings: Any
) -> None:
    """Every request comes from the proxy: counted against it, one client's 30 bad passwords would
    refuse everyone. The client is the nearest X-Forwarded-For hop that is not a trusted proxy."""
    settings.FOOTPRINT_TRUSTED_PROXIES = frozenset({"127.0.0.1", "10.0.0.2"})
    django_user_model.objects.create_user(username="dana", password="correct-horse-battery")

    def sign_in(client_ip: str, password: str) -> int:
        forwarded = f"6.6.6.6, {client_ip}, 10.0.0.2"  # the left part is the client's own word
        form = {"username": "dana", "password": password}
        return Client(HTTP_X_FORWARDED_FOR=forwarded).post("/accounts/login/", form).status_code

    assert [sign_in("203.0.113.9", f"guess-{i}") for i in range(31)][-1] == 429
    assert sign_in("198.51.100.7", "correct-horse-battery") == 302  # another client behind the proxy
    assert sign_in("203.0.113.9", "correct-horse-battery") == 429


def test_healthz_answers_a_head_probe(db: Any) -> None:
    response = Client().head("/healthz")
    assert response.status_code == 200


# --- beat ----------------------------------------------------------------------------------------


def test_every_beat_pass_expires_when_the_next_is_due(settings: Any) -> None:
    """With the worker down and the broker up, passes would pile up and then run back to back."""
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert entry["options"]["expires"] == entry["schedule"], name


# --- deployment ----------------------------------------------------------------------------------


def _env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_gunicorn_conf_loads_with_the_values_of_env_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker compose's `env_file: .env` (copied from .env.example) sets an empty variable to ""."""
    for key, value in _env_example().items():
        monkeypatch.setenv(key, value)

    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))

    assert conf["workers"] >= 2
    assert conf["threads"] == 4


@pytest.mark.parametrize("https", [False, True])
def test_healthz_answers_a_probe_by_ip_over_plain_http(settings: Any, https: bool) -> None:
    """A container's or load balancer's probe asks 127.0.0.1 over HTTP; production names its real
    host in ALLOWED_HOSTS and redirects to https: neither may turn a healthy server "unhealthy"."""
    settings.ALLOWED_HOSTS = ["ledger.example.com"]
    settings.SECURE_SSL_REDIRECT = https

    answer = Client().get("/healthz", HTTP_HOST="127.0.0.1:8000")

    assert answer.status_code == 200, answer.content
    assert answer.json()["database"] == "ok"


def test_manage_py_beside_make_run_finds_the_secret_key_it_kept(tmp_path: Path) -> None:
    """`make run` keeps its key in DATA_DIR/secret-key; the README's manage.py commands run beside it."""
    (tmp_path / "secret-key").write_text("kept-by-make-run-" + "k" * 40)

    result = _settings_start(tmp_path, None, "from django.conf import settings; print(settings.SECRET_KEY)")

    assert result.stdout.strip() == "kept-by-make-run-" + "k" * 40, result.stderr[-2000:]


def test_the_embedded_postgresql_refuses_a_data_dir_too_long_for_its_socket(tmp_path: Path) -> None:
    """With trust authentication the socket must stay behind the data directory's permissions; a
    path too long for it there would have put it in a world-writable folder, open to every user."""
    from django.core.exceptions import ImproperlyConfigured

    from footprint_site.embedded_postgres import embedded_database_settings

    too_long = tmp_path / ("d" * 120) / "postgres"
    with pytest.raises(ImproperlyConfigured, match="FOOTPRINT_DATA_DIR"):
        embedded_database_settings(too_long)
    assert not too_long.exists()


def test_a_postmaster_pid_naming_another_process_is_forgotten(tmp_path: Path) -> None:
    """After a crash or reboot the PID in postmaster.pid may belong to another process now."""
    from footprint_site.embedded_postgres import _forget_a_pid_file_of_another_process

    pid_file = tmp_path / "postmaster.pid"
    with subprocess.Popen(["sleep", "30"]) as sleeper:
        try:
            pid_file.write_text(f"{sleeper.pid}\n{tmp_path}\n")
            _forget_a_pid_file_of_another_process(tmp_path)
        finally:
            sleeper.kill()
    assert not pid_file.exists()
