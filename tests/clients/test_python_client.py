"""The Python client (clients/python) against a real server: live_server, and for the restart test a
real gunicorn in a subprocess. Nothing of the client's HTTP layer or of the database is mocked.

The package is imported from its source directory (tests/clients/conftest.py puts it on sys.path),
so `make test` needs no install step; `pip install ./clients/python` installs the same module.
"""

import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from footprint_client import Client, EventSender, FootprintError, Receipt  # on sys.path from tests/clients/conftest.py

from artifacts.scopes import Scope
from artifacts.services import artifact_corrupt, store_for_project
from ledger.asks.services import ask_decide
from ledger.models import Ask, Run, RunEvent
from tenancy.models import Project
from tests.clients.conftest import SCOPE
from tests.conftest import fixture_events, load_fixture
from tests.servers import Gunicorn, free_port

pytestmark = pytest.mark.django_db(transaction=True)

A_EVENTS: list[dict[str, Any]] = load_fixture("a-run-recording/events.json")["events"]
A_RUN = "run-1796043007829-1"


def _stored(run_id: str = A_RUN) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run__run_id=run_id, seq__isnull=False).order_by("seq"))


def _assert_stored_once(run_id: str = A_RUN) -> None:
    """Every fixture event stored exactly once, numbered per run the way tests.conftest does."""
    stored = _stored(run_id)
    expected = fixture_events("a-run-recording/events.json")
    assert [e.seq for e in stored] == list(range(len(expected)))
    assert [e.doc["type"] for e in stored] == [e["type"] for e in expected]
    assert [e.doc["seq"] for e in stored] == [e["seq"] for e in expected]


# Construction


def test_client_refuses_non_http_urls_and_keeps_its_key_out_of_repr() -> None:
    with pytest.raises(ValueError, match="http"):
        Client("file:///etc/passwd", "k")
    assert "afk_secret" not in repr(Client("http://127.0.0.1:1/", "afk_secret"))


# Events


def test_event_sender_posts_the_fixture_in_batches_and_a_resend_stores_nothing_twice(client: Client) -> None:
    sender = EventSender(client, batch_size=20)
    posted_on_send: list[Receipt] = []
    for event in A_EVENTS:  # the fixture numbers across the capture; the sender renumbers per run
        posted_on_send += sender.send(event)
    assert len(posted_on_send) == 3  # three full batches of 20 went while sending
    assert sender.pending == 16
    final = sender.close()
    assert sender.pending == 0

    receipts = sender.receipts
    assert receipts == posted_on_send + final
    assert [r.accepted for r in receipts] == [20, 20, 20, 16]
    assert sum(r.accepted for r in receipts) == 76
    assert all(r.run_id == A_RUN and r.duplicates == 0 for r in receipts)
    assert [r.last_seq for r in receipts] == [19, 39, 59, 75]
    assert receipts[-1].gaps == ()
    _assert_stored_once()
    head = receipts[-1].head
    assert head == Run.objects.get(run_id=A_RUN).head_hex
    summary = client.run(A_RUN)
    assert summary["events"] == 76
    assert summary["lastSeq"] == 75

    again = EventSender(client, batch_size=20)
    with again:
        for event in A_EVENTS:
            again.send(event)
    assert sum(r.accepted for r in again.receipts) == 0
    assert sum(r.duplicates for r in again.receipts) == 76
    assert again.receipts[-1].head == head
    assert RunEvent.objects.filter(run__run_id=A_RUN).count() == 76
    _assert_stored_once()


def test_event_sender_splits_batches_by_bytes_and_numbers_each_run_separately(client: Client) -> None:
    sender = EventSender(client, batch_size=500, max_batch_bytes=2_200)
    events = [
        {"type": "custom.note", "payload": {"text": "é" * 300, "i": i}, "meta": {"runId": f"run-{i % 2}"}}
        for i in range(10)
    ]
    receipts = sender.send_all(events)
    # ~690-byte events: batches of 3, 3, 3 and 1, each holding both runs but the last (7 receipts).
    assert len(receipts) == 7
    assert sum(r.accepted for r in receipts) == 10
    assert sum(r.accepted for r in receipts) == 10
    for run_id in ("run-0", "run-1"):
        stored = _stored(run_id)
        assert [e.seq for e in stored] == [0, 1, 2, 3, 4]
        assert [e.doc["payload"]["i"] for e in stored] == list(range(int(run_id[-1]), 10, 2))


def test_a_failed_post_keeps_every_numbered_event_buffered(live_server: Any, secret: str) -> None:
    dead = Client(f"http://127.0.0.1:{free_port()}", secret, retries=1, backoff=0.01)
    sender = EventSender(dead, batch_size=20)
    for event in A_EVENTS[:19]:
        assert sender.send(event) == []
    with pytest.raises(urllib.error.URLError):
        sender.send(A_EVENTS[19])  # the 20th fills the batch: the post is refused
    with pytest.raises(urllib.error.URLError):
        sender.send(A_EVENTS[20])
    assert sender.pending == 21
    assert RunEvent.objects.count() == 0

    sender.client = Client(live_server.url, secret)  # the server is reachable again
    receipts = sender.send_all(A_EVENTS[21:])
    assert sum(r.accepted for r in receipts) == 76
    assert receipts[-1].gaps == ()
    _assert_stored_once()


def test_event_sender_needs_a_run_id(client: Client) -> None:
    with pytest.raises(ValueError, match=r"meta\.runId"):
        EventSender(client).send({"type": "x", "payload": {}, "meta": {}})


def test_a_reused_seq_with_other_content_raises_its_code_without_retrying(live_server: Any, secret: str) -> None:
    # backoff=30: a retried 4xx would take at least 15 s.
    client = Client(live_server.url, secret, retries=5, backoff=30)
    event = {"seq": 0, "type": "custom.x", "payload": {"v": 1}, "meta": {"runId": "run-c"}}
    assert client.post_events([event])[0].accepted == 1
    started = time.monotonic()
    with pytest.raises(FootprintError) as caught:
        client.post_events([{**event, "payload": {"v": 2}}])
    assert time.monotonic() - started < 5
    assert caught.value.status == 409
    assert caught.value.code == "ERR_SEQ_CONFLICT"
    assert caught.value.message == caught.value.body["error"]


def test_a_bad_key_and_a_missing_run_raise(live_server: Any, client: Client) -> None:
    with pytest.raises(FootprintError) as caught:
        Client(live_server.url, "afk_nope_nope", retries=0).run(A_RUN)
    assert caught.value.status == 401
    with pytest.raises(FootprintError) as caught:
        client.run("no-such-run")
    assert caught.value.status == 404


# Artifacts


def test_artifacts_five_verbs_and_resolve_round_trip(client: Client) -> None:
    store = client.artifacts(SCOPE)
    text = store.put("note/text", "text/plain", "Grüße, 🌍", label="greeting", digest=True)
    rows = [{"region": "eu", "n": 3, "ratio": 0.25, "tags": ["ü", None, True]}]
    doc = store.put("dataset/rows", "application/json", rows, origin={"runId": "run-1", "toolCallId": "t1"})
    blob_bytes = bytes(range(256)) * 3
    blob = store.put("image/png", "image/png", blob_bytes, parent_refs=[doc["ref"]])
    assert text["label"] == "greeting"
    assert text["digest"].startswith("sha-256:")
    assert doc["bytes"] == len(b'[{"region":"eu","n":3,"ratio":0.25,"tags":["\xc3\xbc",null,true]}]')
    assert blob["bytes"] == len(blob_bytes)

    assert store.head(text["ref"]) == text
    for meta, value in ((text, "Grüße, 🌍"), (doc, rows), (blob, blob_bytes)):
        got = store.get(meta["ref"])
        assert got is not None
        assert got[0]["ref"] == meta["ref"]
        assert got[1] == value
        assert type(got[1]) is type(value)

    metas, cursor = store.list()
    assert [m["ref"] for m in metas] == [blob["ref"], doc["ref"], text["ref"]]  # newest first
    assert cursor is None
    first, cursor = store.list(limit=2)
    assert [m["ref"] for m in first] == [blob["ref"], doc["ref"]]
    assert cursor is not None
    rest, end = store.list(limit=2, cursor=cursor)
    assert [m["ref"] for m in rest] == [text["ref"]]
    assert end is None

    capabilities = store.capabilities()
    assert capabilities["payloadShapes"] == ["text", "json", "binary"]

    result = store.resolve(
        "render_chart",
        {"dataset": "dataset/rows"},
        {"dataset": doc["ref"], "title": "Q3"},
        {"type": "object", "properties": {"dataset": {"type": "string"}, "title": {"type": "string"}}},
    )
    assert result["ok"] is True
    assert result["args"] == {"dataset": rows, "title": "Q3"}
    assert result["wanted"]["dataset"]["ref"] == doc["ref"]
    refused = store.resolve("render_chart", {"dataset": "dataset/rows"}, {"dataset": text["ref"]})
    assert refused["ok"] is False
    assert refused["refusals"][0]["reason"] == "kind-mismatch"

    # Another scope of the same project sees none of it.
    elsewhere = client.artifacts({"conversationId": "conv-2"})
    assert elsewhere.head(text["ref"]) is None
    assert elsewhere.list() == ([], None)

    store.delete(text["ref"])
    assert store.head(text["ref"]) is None
    assert store.get(text["ref"]) is None
    store.delete(text["ref"])  # deleting an absent ref is fine: 204 either way
    assert [m["ref"] for m in store.list()[0]] == [blob["ref"], doc["ref"]]


def test_artifact_json_text_can_be_sent_verbatim(client: Client) -> None:
    store = client.artifacts(SCOPE)
    # What JSON.stringify writes for {x: 1.0}; json.dumps would write 1.0 (and another digest).
    meta = store.put("k", "application/json", '{"x":1}', shape="json", digest=True)
    assert meta["bytes"] == 7
    got = store.get(meta["ref"])
    assert got is not None
    assert got[1] == {"x": 1}
    with pytest.raises(TypeError):
        store.put("k", "text/plain", b"bytes", shape="text")


def test_absent_artifacts_are_none_and_other_errors_raise_with_their_code(
    live_server: Any, secret: str, client: Client
) -> None:
    store = client.artifacts(SCOPE)
    assert store.head("art_0000000000000000000000") is None
    assert store.get("art_0000000000000000000000") is None
    # Not the ref grammar: absent without a request (artifacts spec §1.3), even where the string
    # would leave the route ("/" is decoded back into a path separator).
    assert store.get("not-even-a-ref") is None
    assert store.head("art_x/y") is None

    with pytest.raises(FootprintError) as caught:
        store.put("", "text/plain", "x")
    assert caught.value.status == 422
    assert caught.value.code == "ERR_INVALID_ARTIFACT"

    with pytest.raises(FootprintError) as caught:
        store.put("child", "application/json", {}, parent_refs=["art_0000000000000000000000"])
    assert caught.value.code == "ERR_UNKNOWN_PARENT_REF"

    with pytest.raises(FootprintError) as caught:
        store.resolve("t", {}, {})
    assert caught.value.status == 422
    assert caught.value.code == "ERR_INVALID_WANTS"

    with pytest.raises(FootprintError) as caught:
        client.artifacts({"conversationId": "c", "team": "x"}).list()
    assert caught.value.status == 400
    assert caught.value.code == "ERR_INVALID_SCOPE"

    # A 404 without ERR_ARTIFACT_NOT_FOUND is not "absent": here the base URL misses the API.
    astray = Client(f"{live_server.url}/elsewhere", secret, retries=0).artifacts(SCOPE)
    with pytest.raises(FootprintError) as caught:
        astray.head("art_0000000000000000000000")
    assert caught.value.status == 404
    assert caught.value.code != "ERR_ARTIFACT_NOT_FOUND"


def test_an_integrity_failure_is_raised_not_retried(live_server: Any, secret: str, project: Project) -> None:
    store = Client(live_server.url, secret, retries=5, backoff=30).artifacts(SCOPE)
    meta = store.put("note", "text/plain", "intact", digest=True)
    assert artifact_corrupt(store=store_for_project(project=project), scope=Scope(*SCOPE.values()), ref=meta["ref"])
    started = time.monotonic()
    with pytest.raises(FootprintError) as caught:
        store.get(meta["ref"])
    assert time.monotonic() - started < 5
    assert caught.value.status == 500
    assert caught.value.code == "ERR_ARTIFACT_INTEGRITY"


# Asks


def _decide_later(ask_id: int, delay: float, errors: list[BaseException]) -> threading.Thread:
    def decide() -> None:
        try:
            time.sleep(delay)
            ask_decide(ask_id=ask_id, approved=True, via=Ask.Via.API, by_label="dana", note="ok", value="eu-west")
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


def test_open_ask_and_wait_for_a_decision_made_elsewhere(client: Client) -> None:
    pause = {"toolCallId": "q1", "toolName": "ask_user", "question": "Which region?"}
    ask = client.open_ask("run-ask", pause, checkpoint={"step": 3}, session_id="s-1")
    assert ask["status"] == "open"
    assert ask["kind"] == "plain"
    assert ask["sessionId"] == "s-1"
    assert client.open_ask("run-ask", pause)["id"] == ask["id"]  # idempotent per run and tool call
    assert client.get_ask(ask["id"])["checkpoint"] == {"step": 3}

    with pytest.raises(TimeoutError):
        client.wait_for_decision(ask["id"], timeout=0.5)

    errors: list[BaseException] = []
    thread = _decide_later(ask["id"], 1.0, errors)
    try:
        started = time.monotonic()
        decision = client.wait_for_decision(ask["id"], timeout=30)
        waited = time.monotonic() - started
    finally:
        thread.join(10)
    assert errors == []
    assert decision["approved"] is True
    assert decision["by"] == "dana"
    assert decision["note"] == "ok"
    assert decision["answer"] == "eu-west"
    assert 0.5 < waited < 20
    assert client.wait_for_decision(ask["id"], timeout=0) == decision  # decided: answers at once


def test_open_ask_refuses_a_naive_deadline_and_sends_an_aware_one(client: Client) -> None:
    from datetime import UTC, datetime

    pause = {"toolCallId": "q2", "toolName": "ask_user", "question": "?"}
    with pytest.raises(ValueError, match="timezone"):
        client.open_ask("run-ask", pause, deadline=datetime(2030, 1, 1))  # noqa: DTZ001
    ask = client.open_ask("run-ask", pause, deadline=datetime(2030, 1, 1, tzinfo=UTC), on_timeout="approve")
    assert ask["deadline"] == "2030-01-01T00:00:00Z"
    assert ask["onTimeout"] == "approve"


# Retries through a real server restart


def test_flush_and_put_retry_through_a_server_restart(secret: str, tmp_path: Path) -> None:
    server = Gunicorn(tmp_path / "gunicorn.log")
    try:
        server.start()
        # Enough patience for gunicorn's start-up: 20 retries, waits doubling from 0.1 s to 1 s.
        client = Client(server.url, secret, timeout=10, retries=20, backoff=0.1, max_backoff=1.0)
        store = client.artifacts(SCOPE)
        sender = EventSender(client, batch_size=20)
        assert len(sender.send_all(A_EVENTS[:20])) == 1  # the server is up: one batch posted

        server.stop()
        outcome: dict[str, Any] = {}

        def flush_rest() -> None:
            try:
                outcome["receipts"] = sender.send_all(A_EVENTS[20:])
            except BaseException as error:
                outcome["flush_error"] = error

        def put_one() -> None:
            try:
                outcome["meta"] = store.put("note/text", "text/plain", "written while the server restarted")
            except BaseException as error:
                outcome["put_error"] = error

        threads = [threading.Thread(target=flush_rest), threading.Thread(target=put_one)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert all(thread.is_alive() for thread in threads)  # still retrying: nothing can answer
        assert RunEvent.objects.filter(run__run_id=A_RUN).count() == 20

        server.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
        assert "flush_error" not in outcome, outcome["flush_error"]
        assert "put_error" not in outcome, outcome["put_error"]

        receipts = outcome["receipts"]
        assert sum(r.accepted for r in receipts) == 56
        assert sum(r.accepted for r in sender.receipts) == 76
        assert sender.pending == 0
        assert receipts[-1].gaps == ()
        assert RunEvent.objects.filter(run__run_id=A_RUN).count() == 76
        _assert_stored_once()

        metas, _ = store.list()
        assert [m["ref"] for m in metas] == [outcome["meta"]["ref"]]  # exactly one artifact minted
        got = store.get(outcome["meta"]["ref"])
        assert got is not None
        assert got[1] == "written while the server restarted"
    finally:
        server.stop(signal.SIGKILL)


def test_a_put_is_not_retried_once_the_request_may_have_reached_the_server(secret: str, tmp_path: Path) -> None:
    """A listener that accepts and then hangs up: a read could be retried, a put must not be."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        accepted: list[int] = []
        stop = threading.Event()

        def hang_up() -> None:
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    peer, _ = listener.accept()
                except TimeoutError:
                    continue
                peer.recv(65536)
                accepted.append(1)
                peer.close()

        thread = threading.Thread(target=hang_up)
        thread.start()
        try:
            store = Client(url, secret, retries=3, backoff=0.01).artifacts(SCOPE)
            with pytest.raises(ConnectionError):  # http.client.RemoteDisconnected
                store.put("note", "text/plain", "x")
            assert len(accepted) == 1
            with pytest.raises(ConnectionError):
                store.head("art_0000000000000000000000")
            assert len(accepted) == 1 + 4  # a read: the first attempt and three retries
        finally:
            stop.set()
            thread.join(5)
