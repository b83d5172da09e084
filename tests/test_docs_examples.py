"""Every shell example of README.md and docs/*.md, run as a reader would paste it, against a live
server started as `make run` starts it (its own database, data directory and port).

Each file's runnable blocks (```sh, ```bash, ```console) run in order in one bash session
(`set -euo pipefail`), so a variable a block uses must be set by an earlier line of the same file.
A block right after `<!-- not run: why -->` is not run (a server of its own, the suite itself, an
install): the marker must give its reason, and every other block runs. A curl answer other than
2xx fails the example unless the paragraph right before its block says to expect that status
("expect 409 …").
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from django.db import connection

from tests.servers import database_url_for_subprocesses, free_port

pytestmark = pytest.mark.celery
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
START_TIMEOUT_SECONDS = 180
RUN_TIMEOUT_SECONDS = 300
SHELL_LANGUAGES = {"sh", "bash", "console", "shell"}
FENCE = re.compile(r"^```([\w-]*)\s*$")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
EXPECTED_STATUS = re.compile(r"\b[Ee]xpect(?:s|ed)?\b[^.:]*?\b([1-5]\d\d)\b")
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_ -]*>")


@dataclass
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    code: str
    skip_reason: str | None
    expected_statuses: list[str]

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(PROJECT_ROOT)}:{self.line}"


def shell_blocks(document: Path) -> list[Block]:
    """The document's shell blocks, each with the marker and the paragraph right before it."""
    lines = document.read_text().splitlines()
    blocks: list[Block] = []
    prose: list[str] = []  # the text since the previous block
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            prose.append(lines[index])
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        if fence.group(1) in SHELL_LANGUAGES:
            before = "\n".join(prose).strip()
            paragraph = re.split(r"\n\s*\n", before)[-1] if before else ""
            marker = NOT_RUN.search(paragraph.splitlines()[-1]) if paragraph else None
            blocks.append(
                Block(
                    document=document,
                    line=start + 1,
                    code="\n".join(body),
                    skip_reason=marker.group(1) if marker else None,
                    expected_statuses=EXPECTED_STATUS.findall(paragraph),
                )
            )
        prose = []
    return blocks


ALL_BLOCKS = [block for document in DOCUMENTS for block in shell_blocks(document)]

# Every curl of an example goes through this: it reports the HTTP status beside the answer and
# fails the example on anything but 2xx, unless the block's paragraph expects that status.
CURL_CHECK = r"""
curl() {
  local errors status rc=0
  errors=$(mktemp)
  command curl --write-out '%{stderr}@@status=%{http_code}\n' "$@" 2>"$errors" || rc=$?
  status=$(sed -n 's/^@@status=//p' "$errors" | tail -n 1)
  grep -v '^@@status=' "$errors" >&2 || true
  rm -f "$errors"
  echo "[HTTP ${status:-none}]" >&2
  case "$status" in
    2??) return "$rc" ;;
  esac
  if [[ -n "$status" && " $DOCS_EXPECTED " == *" $status "* ]]; then
    return 0
  fi
  echo "docs example $DOCS_BLOCK: HTTP ${status:-none} where 2xx was expected" >&2
  return 22
}
"""


def script_of(blocks: list[Block]) -> str:
    parts = ["set -euo pipefail", CURL_CHECK, "trap 'echo \"docs example $DOCS_BLOCK failed\" >&2' ERR"]
    for block in blocks:
        parts.append(f"DOCS_BLOCK={block.name!r}; DOCS_EXPECTED={' '.join(block.expected_statuses)!r}")
        parts.append(f"echo '### {block.name}'")
        parts.append(block.code)
    return "\n".join(parts) + "\n"


def test_every_example_is_found_and_marked_deliberately() -> None:
    """The extraction itself: blocks exist, and none that runs holds a placeholder like <your-key>."""
    names = [d.name for d in DOCUMENTS]
    assert "README.md" in names, names
    assert len(names) > 1, names
    assert ALL_BLOCKS, "no shell examples found"
    for block in ALL_BLOCKS:
        if block.skip_reason is None:
            assert not PLACEHOLDER.search(block.code), f"{block.name} holds a placeholder: {block.code}"


def test_every_example_not_run_says_why() -> None:
    not_run = [block for block in ALL_BLOCKS if block.skip_reason is not None]
    assert all(len(block.skip_reason or "") >= 10 for block in not_run), [b.name for b in not_run]
    assert len(not_run) < len(ALL_BLOCKS) / 2, "most examples are marked not run: the test would prove little"


@pytest.fixture(scope="module")
def database_url(django_db_blocker: Any) -> Iterator[str]:
    """A database of the server's own, made for this test and dropped after it."""
    with django_db_blocker.unblock():
        db = connection.settings_dict
    name = f"footprint_docs_{uuid.uuid4().hex[:8]}"
    host = db["HOST"] or "localhost"
    server: dict[str, Any] = {"host": host, "user": db["USER"], "password": db.get("PASSWORD") or None}
    if not host.startswith("/"):
        server["port"] = db["PORT"] or 5432
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url_for_subprocesses(name)
    finally:
        with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _started_by(data_dir: str) -> list[psutil.Process]:
    """Every process of the stack: they all carry its data directory in their environment."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("FOOTPRINT_DATA_DIR") == data_dir:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _stop(stack: subprocess.Popen[bytes], data_dir: str) -> None:
    """Ctrl-C as a person would; then whatever is left of it (its services run in sessions of
    their own) is killed, group by group, so nothing outlives the test."""
    if stack.poll() is None:
        stack.send_signal(signal.SIGINT)
        try:
            stack.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
    for process in _started_by(data_dir):
        try:
            os.killpg(os.getpgid(process.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[dict[str, str]]:
    """`make run` (python -m footprint_site.stack) on a free port; the environment its examples run in."""
    data_dir = tempfile.mkdtemp(prefix="footprint-docs-")
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "PORT": str(port), "FOOTPRINT_DATA_DIR": data_dir}
    env.pop("DJANGO_SECRET_KEY", None)  # the stack makes and keeps its own, as on a fresh machine
    env["WEB_CONCURRENCY"] = "2"  # a small machine runs the rest of the suite beside it
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    output = Path(data_dir) / "make-run.log"
    with output.open("wb") as out:
        stack = subprocess.Popen(
            [sys.executable, "-m", "footprint_site.stack"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "Press Ctrl-C to stop it." not in output.read_text(errors="replace"):
            if stack.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"make run did not start:\n{output.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
            assert answer.status == 200
        yield env
    finally:
        _stop(stack, data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


RUNNABLE = [d for d in DOCUMENTS if any(b.skip_reason is None for b in shell_blocks(d))]


@pytest.mark.parametrize("document", RUNNABLE, ids=lambda d: str(d.relative_to(PROJECT_ROOT)))
def test_shell_examples_run(document: Path, server: dict[str, str]) -> None:
    blocks = [b for b in shell_blocks(document) if b.skip_reason is None]
    result = subprocess.run(
        ["bash", "-c", script_of(blocks)],
        cwd=PROJECT_ROOT,
        env=server,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, (
        f"the examples of {document.name} failed ({result.returncode}).\n"
        f"--- stdout ---\n{result.stdout[-6000:]}\n--- stderr ---\n{result.stderr[-6000:]}"
    )
