"""Set-up and configuration: make run's checks, settings read from the environment, what installs."""

import ast
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from footprint_site import stack
from footprint_site.embedded_postgres import postmaster_running

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def _production_settings(tmp_path: Path, values: dict[str, str], expression: str) -> subprocess.CompletedProcess[str]:
    """Production settings (DEBUG off, a key of this test's own) in a fresh interpreter, with
    `values` in the environment; prints repr(`expression`) evaluated on django.conf.settings."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "FOOTPRINT_"))}
    environment.update(
        DJANGO_SETTINGS_MODULE="footprint_site.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="a-long-random-key-of-this-review-only-" * 2,
        FOOTPRINT_DATA_DIR=str(tmp_path),
        **values,
    )
    code = f"from django.conf import settings as s; print(repr({expression}))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


# --- make run (footprint_site/stack.py) ----------------------------------------------------------


def test_make_run_does_not_call_a_port_taken_that_only_has_connections_in_time_wait() -> None:
    """The web server closes idle keep-alive connections itself, so for a minute after `make run`
    stops, its port holds TIME_WAIT entries. gunicorn binds over them (SO_REUSEADDR); the start-up
    check must too, or `make run` again says "127.0.0.1:8000 is taken" with nothing serving there."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first, as gunicorn does with an idle keep-alive
        time.sleep(0.2)
        client.close()
    time.sleep(0.2)  # nothing listens on the port now; only the TIME_WAIT entry is left

    stack._refuse_a_taken_port("127.0.0.1", port)  # raises NotStarted("… is taken …") today


def test_make_run_stops_the_embedded_postgresql_it_started_over_a_stale_pid_file(tmp_path: Path) -> None:
    """After a reboot, .data/postgres/postmaster.pid may name a PID another program now has. The
    settings forget such a file and start the server (embedded_postgres), but `make run` took the
    live PID for a server another `make run` started, and so left the one it started running after
    Ctrl-C."""
    pgdata = tmp_path / "postgres"
    pgdata.mkdir()
    with subprocess.Popen(["sleep", "30"]) as unrelated:
        try:
            (pgdata / "postmaster.pid").write_text(f"{unrelated.pid}\n{pgdata}\n")
            running = postmaster_running(pgdata)
        finally:
            unrelated.kill()
    assert running is False, "a `sleep` process was taken for the embedded PostgreSQL"


# --- settings ------------------------------------------------------------------------------------


def test_raising_a_body_limit_raises_djangos_own_cap_with_it(tmp_path: Path) -> None:
    """DATA_UPLOAD_MAX_MEMORY_SIZE followed only FOOTPRINT_MAX_RECORDING_BYTES: an operator raising
    FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES (which an artifact 413 tells them to do) or
    FOOTPRINT_MAX_REQUEST_BYTES past 33 MiB got capabilities announcing the new limit and a 413
    for every body between 33 MiB and it."""
    limits = {
        "FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES": str(64 * MiB),
        "FOOTPRINT_MAX_REQUEST_BYTES": str(48 * MiB),
    }
    result = _production_settings(tmp_path, limits, "s.DATA_UPLOAD_MAX_MEMORY_SIZE")
    assert result.returncode == 0, result.stderr[-2000:]

    cap = int(result.stdout.strip())
    for name, value in limits.items():
        assert cap > int(value), f"{name}={value} but Django refuses any body over {cap} bytes first"


@pytest.mark.parametrize(
    ("variable", "expression", "expected"),
    [
        # anchors would be HMAC-signed with an empty key
        ("FOOTPRINT_ANCHOR_KEY", "s.FOOTPRINT_ANCHOR_KEY == s.SECRET_KEY", "True"),
        # the default without DEBUG is 1: secure cookies, https redirect, HSTS
        ("DJANGO_HTTPS", "s.SESSION_COOKIE_SECURE and s.SECURE_SSL_REDIRECT and s.SECURE_HSTS_SECONDS > 0", "True"),
    ],
)
def test_a_variable_left_empty_in_env_means_its_default(
    tmp_path: Path, variable: str, expression: str, expected: str
) -> None:
    """docker compose's `env_file: .env` sets a variable left empty there to "", not unset (as
    gunicorn.conf.py and DATABASE_URL / CELERY_BROKER_URL already allow for). An empty anchor key
    signed every chain anchor with the empty key; an empty DJANGO_HTTPS turned secure cookies and
    the https redirect off. Either the default holds or start-up refuses, naming the variable."""
    result = _production_settings(tmp_path, {variable: ""}, expression)

    if result.returncode != 0:
        assert variable in result.stderr, result.stderr[-2000:]
    else:
        assert result.stdout.strip() == expected, f"{variable}='' gave {result.stdout.strip()}"


def _read_by(path: Path, pattern: str) -> set[str]:
    return set(re.findall(pattern, path.read_text()))


def test_env_example_names_every_variable_the_settings_and_gunicorn_read() -> None:
    """.env.example says it holds "every variable the settings read"; docker compose users copy
    it. FOOTPRINT_ANCHOR_KEY (which the README says to set apart from the secret key), the HSTS
    switches, the beat periods, the artifact body limit and gunicorn's WEB_THREADS, access log and
    control socket were missing. A commented-out line counts."""
    read = _read_by(ROOT / "footprint_site/settings.py", r"env\.\w+\(\s*\"([A-Z][A-Z0-9_]*)\"")
    read |= _read_by(ROOT / "gunicorn.conf.py", r"os\.environ(?:\.get\(|\[)\s*['\"]([A-Z][A-Z0-9_]*)['\"]")
    read.discard("FOOTPRINT_TEST_HOOKS")  # test-only, never in a deployment's .env
    assert "DJANGO_SECRET_KEY" in read  # the patterns find what they should
    assert "WEB_CONCURRENCY" in read

    named = _read_by(ROOT / ".env.example", r"(?m)^#?\s*([A-Z][A-Z0-9_]*)=")

    assert not sorted(read - named), f".env.example lacks {sorted(read - named)}"


# --- installing ----------------------------------------------------------------------------------


def _runtime_closure(requirements: list[str]) -> set[str]:
    """Every distribution that installing `requirements` brings in (as installed here)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            declared = requires(requirement.name) or []
        except PackageNotFoundError:
            continue
        for text in declared:
            dependency = Requirement(text)
            extras = requirement.extras or {""}
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in extras):
                todo.append(dependency)
    return {key.split("[")[0] for key in seen}


PROJECT_PACKAGES = ("footprint_site", "tenancy", "ledger", "artifacts")


def test_pyproject_dependencies_provide_every_module_the_server_imports() -> None:
    """`pip install .` installs [project.dependencies] only. settings.py imports django_stubs_ext
    at start-up, which only the dev extra's django-stubs brings: without it the server cannot start."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = _runtime_closure(project["dependencies"])
    providers = packages_distributions()

    unprovided = {}
    for package in PROJECT_PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            for node in ast.parse(source.read_text()).body:  # module level: run when imported
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in PROJECT_PACKAGES:
                        continue
                    dists = {canonicalize_name(d) for d in providers.get(top, [])}
                    if not dists & installed:
                        unprovided.setdefault(top, str(source.relative_to(ROOT)))

    assert not unprovided, f"imported but not installed by pyproject's dependencies: {unprovided}"


def test_the_install_gives_mypyc_the_setuptools_it_compiles_with() -> None:
    """`make install` compiles the hot path with mypyc through setuptools (compiled.py). venvs of
    Python 3.12+ carry no setuptools and requirements.lock pins none (pip freeze leaves it out), so
    on `make PYTHON=python3.12 run`, which the README offers, it prints "Not compiled (No module
    named 'setuptools')" and blames a missing C compiler, every time."""
    lock = (ROOT / "requirements.lock").read_text()
    makefile = (ROOT / "Makefile").read_text()
    install_recipe = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]

    assert re.search(r"(?mi)^setuptools\b", lock) or "setuptools" in install_recipe, (
        "neither requirements.lock nor the install step installs setuptools"
    )
