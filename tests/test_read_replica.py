"""Pages read from a streaming replica while it keeps up, and from the primary when it falls behind
its bound, goes away, or has not replayed what a page asks for; writes never go there.

A private primary and standby started from the machine's PostgreSQL binaries (tests/replication.py)
and the production web server over them, as an operator would run them.
"""

import http.cookiejar
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import fixture_events
from tests.replication import StreamingPair
from tests.servers import PROJECT_ROOT, Gunicorn

FIRST_RUN = "run-1796043007829-1"  # a-run-recording
MAX_LAG_SECONDS = 1

SETUP = """
from django.contrib.auth import get_user_model
from tenancy.services import agent_key_create, membership_grant, project_get_or_create
from tenancy.models import AGENT_SCOPES
project = project_get_or_create(slug="replicated")
person = get_user_model().objects.create_user("auditor", password="auditor-password")
membership_grant(user=person, project=project, role="auditor")
print(agent_key_create(project=project, scopes=AGENT_SCOPES)[1])
"""


def _manage(database_url: str, *args: str) -> str:
    env = {"DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "test-only", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


class Browser:
    """A signed-in person's requests, cookies kept, redirects not followed."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        try:
            with self.opener.open(self.base_url + path, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()

    def sign_in(self, username: str, password: str) -> None:
        _, _, form = self.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert token, form
        body = urllib.parse.urlencode({"csrfmiddlewaretoken": token[1], "username": username, "password": password})
        request = urllib.request.Request(  # noqa: S310 - loopback
            self.base_url + "/accounts/login/", data=body.encode(), headers={"Referer": self.base_url + "/"}
        )
        with self.opener.open(request, timeout=30) as answer:
            assert "/accounts/login/" not in answer.url, "sign-in refused"


def _ingest(base_url: str, secret: str, events: list[dict[str, Any]]) -> int:
    request = urllib.request.Request(  # noqa: S310 - loopback
        base_url + "/api/v1/events",
        data=json.dumps({"events": events}).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        return int(answer.status)


def _run_page(run_id: str) -> str:
    return f"/projects/replicated/runs/{run_id}/"


def _until(predicate: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        if outcome or time.monotonic() > deadline:
            return outcome
        time.sleep(0.2)


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingPair]:
    replication = StreamingPair()
    try:
        replication.start()
        yield replication
    finally:
        replication.stop()


@pytest.fixture(scope="module")
def site(pair: StreamingPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    _manage(pair.primary.url, "migrate", "--noinput")
    secret = _manage(pair.primary.url, "shell", "-c", SETUP).strip().splitlines()[-1]
    web = Gunicorn(
        tmp_path_factory.mktemp("replica-web") / "gunicorn.log",
        env={
            "DATABASE_URL": pair.primary.url,
            "DATABASE_REPLICA_URL": pair.standby.url,
            "DATABASE_REPLICA_MAX_LAG": str(MAX_LAG_SECONDS),
        },
    )
    web.start()
    try:
        person = Browser(web.url)
        person.sign_in("auditor", "auditor-password")
        yield {"url": web.url, "secret": secret, "person": person}
    finally:
        web.stop()


def _read_from(person: Browser, path: str) -> tuple[int, str, str]:
    status, headers, body = person.get(path)
    return status, headers.get("X-Footprint-Read-From", ""), body


def test_pages_read_from_the_replica_while_it_keeps_up(pair: StreamingPair, site: dict[str, Any]) -> None:
    assert _ingest(site["url"], site["secret"], fixture_events("a-run-recording/events.json")) == 200
    pair.wait_caught_up()

    answer = _until(lambda: (a := _read_from(site["person"], _run_page(FIRST_RUN)))[1] == "replica" and a)
    assert answer, "the pages never read from a replica that keeps up"
    status, _, body = answer
    assert status == 200
    assert "Read from a replica" in body
    assert "behind the primary" in body
    # Who the person is comes from the primary: a session the replica may not have yet still counts.
    assert "Sign out auditor" in body


def test_a_replica_behind_its_bound_sends_pages_to_the_primary(pair: StreamingPair, site: dict[str, Any]) -> None:
    pair.standby.execute("SELECT pg_wal_replay_pause()")
    try:
        second = [
            {**event, "meta": {**event["meta"], "runId": "run-while-paused"}}
            for event in fixture_events("a-run-recording/events.json")
        ]
        assert _ingest(site["url"], site["secret"], second) == 200  # writes go to the primary

        # Until the lag passes its bound, a run the replica lacks is read on the primary all the same.
        assert site["person"].get(_run_page("run-while-paused"))[0] == 200

        answer = _until(lambda: (a := _read_from(site["person"], _run_page(FIRST_RUN)))[1] == "primary" and a)
        assert answer, "pages kept reading from a replica past its lag bound"
        assert "Read from a replica" not in answer[2]
    finally:
        pair.standby.execute("SELECT pg_wal_replay_resume()")
    pair.wait_caught_up()
    assert _until(lambda: _read_from(site["person"], _run_page("run-while-paused"))[1] == "replica")


def test_a_replica_that_goes_away_costs_no_page(pair: StreamingPair, site: dict[str, Any]) -> None:
    assert _until(lambda: _read_from(site["person"], _run_page(FIRST_RUN))[1] == "replica")
    pair.standby.stop("immediate")
    try:
        answers = [_read_from(site["person"], _run_page(FIRST_RUN)) for _ in range(10)]
        assert [status for status, _, _ in answers] == [200] * 10
        assert {source for _, source, _ in answers} == {"primary"}
    finally:
        pair.standby.start()
    assert _until(lambda: _read_from(site["person"], _run_page(FIRST_RUN))[1] == "replica")


def test_the_agents_api_never_reads_from_the_replica(pair: StreamingPair, site: dict[str, Any]) -> None:
    request = urllib.request.Request(  # noqa: S310 - loopback
        site["url"] + f"/api/v1/runs/{FIRST_RUN}/events", headers={"Authorization": f"Bearer {site['secret']}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        assert answer.status == 200
        assert "X-Footprint-Read-From" not in answer.headers
