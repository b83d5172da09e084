"""The JavaScript observer (static/js/footprint-observer.js) against a live server, under Node's
own test runner: tests/js/observer.test.mjs replays real agentfootprint captures through it."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tenancy.services import agent_key_create, project_get_or_create

# The Node process reaches the live server over HTTP, outside this test's transaction: the rows
# must really be committed, so the database is truncated afterwards instead of rolled back.
pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
NODE_TEST = "tests/js/observer.test.mjs"
TIMEOUT_SECONDS = 120


def _text(output: str | bytes | None) -> str:
    # TimeoutExpired carries bytes even when the run asked for text.
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def test_js_observer_delivers_runs_to_a_live_server(live_server: Any) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` is not on PATH: this test runs the JS observer under Node >= 18 (CI has Node 20).")
    _, secret = agent_key_create(project=project_get_or_create(slug="js-observer"), scopes=["ingest", "read"])
    env = {**os.environ, "FOOTPRINT_URL": live_server.url, "FOOTPRINT_KEY": secret}
    try:
        completed = subprocess.run(
            [node, "--test", NODE_TEST],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"node --test {NODE_TEST} ran over {TIMEOUT_SECONDS} s\n"
            f"--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}"
        )
    output = f"--- stdout ---\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    if completed.returncode != 0:
        print(output)
    assert completed.returncode == 0, f"node --test {NODE_TEST} exited {completed.returncode}\n{output}"
