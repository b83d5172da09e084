"""Hostile and malformed input (issue #7): every write endpoint refuses it with a specific 4xx
that names the problem, never a 5xx, and writes nothing, not even part of a batch.

"Nothing written" is checked on every ledger and artifacts table (listed through django.apps,
plus the raw partitioned `artifacts_payload`): row counts *and* a digest of every row's content,
so an UPDATE of a run's head or an ask's status is caught as surely as an INSERT.

Each test sends one family of hostile inputs to one endpoint. Every input runs in its own
savepoint, rolled back afterwards, and a test reports *every* input that was mishandled, not just
the first, so one run lists all the server's failures.

Decisions taken where the specs are silent (each is asserted below):

- Duplicate JSON keys are refused with 400 naming the key, at any depth, on every JSON body that
  is not an event stream (asks, decisions, bundles, artifacts, AF-Scope). Event streams (events,
  recordings, OTLP) are read as the framework's JavaScript reads them: the last value wins, and
  only the canonical form of what was read is hashed (the lead's decision; asserted below).
- Integers beyond 64 bits (e.g. 2**70) are read as JavaScript reads them, as the nearest double,
  and kept as that double everywhere (the framework hashes the same); fields with a range (seq,
  wallClockMs) answer 422 naming the field (the lead's decision; asserted below).
- Nesting the parser accepts (under orjson's 1,024 levels) but the server cannot canonicalize or
  store must be a 4xx naming the depth, never a 500.
- The JSON API takes only `application/json` (a charset parameter is fine): text/plain,
  form-encoded, multipart, XML or no Content-Type answer 415 naming application/json, as
  /v1/traces already does. A `Content-Encoding` the API does not decode (gzip outside /v1/traces)
  is 415 naming Content-Encoding, not a misleading "invalid UTF-8".
- U+0000 in an identifier the server stores as text (runId, sessionId, type, toolCallId, `by`,
  note) is 422 naming the field, as the artifact put and AF-Scope already do. Inside free-form
  JSON (payloads) it is valid and stored, the queryable copy carrying U+FFFD.
- Identifiers that are stored and indexed are length-capped like event ids (≤ 200 characters):
  ask runId/toolCallId, a decision's `by`; an API decision note has the page's 2,000-character cap.
- Human forms answer an invalid submission with 422 naming the field (the ask page already does),
  invalid UTF-8 with a 4xx rather than a silent U+FFFD substitution, a body over Django's
  DATA_UPLOAD_MAX_MEMORY_SIZE with 413 naming the limit, and too many fields with a 4xx saying so,
  also on forms whose view never reads the body (releasing a hold): nothing is done first.
- A checkpoint is any JSON value ("stored verbatim"), but one that is not an object must then not
  break the ask page: either 422 naming checkpoint at the door, or the page renders.
- "Authorization: Bearer  <key>" (two spaces) is valid (RFC 7235 allows 1*SP) and lower-case
  "bearer" too: both authenticate, on the API as on /v1/traces.

Decisions where a spec speaks, and wins over a blanket "4xx":

- Cursors: artifacts spec §1.5 and §12.1(10) say an undecodable cursor restarts from the first
  page and is never an error; the server applies that rule to every cursor (runs, inbox, pages),
  so those cases assert 200 and the first page. Non-integer `after_seq` / `limit` (and a `wait`
  that is not a number) are 422 naming the parameter; integers out of range are clamped (`limit`,
  `wait`) or simply match nothing (`after_seq`).
- Malformed refs: get/head answer the one 404 ERR_ARTIFACT_NOT_FOUND body (README: byte-identical
  but for the ref); DELETE of a non-grammar ref is "a successful no-op" (spec §1.4): 204, nothing
  deleted. A huge `kind` or `mediaType` is accepted (spec §2.3: any non-blank string); an
  `expiresAt` far in the future is clamped to the store's ceiling (a store may only shorten).
  A json payload's `value` is opaque text kept byte for byte, so duplicate keys inside it are
  the producer's business; only the request envelope must be unambiguous.
- OTLP spans with bad ids are rejected the OTLP/HTTP way: 200 with `partialSuccess.rejectedSpans`
  and a message naming the field, the bad span not stored and the valid spans of the same request
  kept (unlike the event API, whose batches are all or nothing). OTLP/JSON receivers ignore what
  they do not know (unknown fields, unknown enum names), so those are not hostile.
- An audit bundle is evidence even when its chain is broken: a tampered record nested 300 deep is
  stored with its `valid: false` verdict; only what cannot be hashed at all (1,000 deep) is a 4xx.
- Page filters that do not parse are dropped (RunFilterForm's documented rule): a page answers
  200, never 5xx, for them; a U+0000 in any filter is such a value. The JSON API answers 422.
"""

import base64
import gzip
import json
import secrets
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.test.client import ClientHandler
from psycopg import pq

from artifacts.models import Artifact, ArtifactHold, ArtifactStore
from artifacts.scopes import Scope, scope_header
from artifacts.services import PutInput, artifact_hold_place, artifact_put, store_for_project
from footprint_site import auth
from ledger.models import OtlpSpan, RunEvent
from tenancy.models import Membership
from tests.conftest import DATA, ApiClient, load_fixture, person

pytestmark = pytest.mark.django_db

T = TypeVar("T")
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
PROTOBUF = "application/x-protobuf"
MiB = 1024 * 1024
AF_SCOPE = scope_header({"tenant": "t1", "principal": "p1", "conversationId": "c1"})
SLOT = b'"@@HOSTILE@@"'  # stands in a valid document where a free-form JSON value is allowed
RUN = "run-hostile"
PAUSE = "agentfootprint.pause.request"
TOOL_START, TOOL_END = "agentfootprint.stream.tool_start", "agentfootprint.stream.tool_end"
BIG_INT = str(2**70)  # 1180591620717411303424: orjson reads it as a float
OTLP_FIXTURE = (DATA / "g-otel/otlp-traces.json").read_bytes()
Mentions = tuple[str, ...]  # at least one of them must appear in the answer


# --- nothing written -----------------------------------------------------------------------------


@cache
def _snapshot_sql() -> str:
    models = [m for label in ("ledger", "artifacts") for m in apps.get_app_config(label).get_models(True)]
    # The payload table is partitioned raw SQL (no model); its parent reads every partition.
    tables = sorted({m._meta.db_table for m in models} | {"artifacts_payload"})
    return " UNION ALL ".join(
        f"SELECT '{table}', count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) "  # noqa: S608
        f"FROM {connection.ops.quote_name(table)} t"
        for table in tables
    )


def snapshot() -> dict[str, tuple[int, str]]:
    """Row count and a digest of all row contents, per ledger/artifacts table."""
    with connection.cursor() as cursor:
        cursor.execute(_snapshot_sql())
        return {table: (count, digest) for table, count, digest in cursor.fetchall()}


def _changes(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> dict[str, str]:
    return {
        table: f"{before[table][0]} → {after[table][0]} rows"
        + (" (same count, content changed)" if before[table][0] == after[table][0] else "")
        for table in before
        if before[table] != after.get(table)
    }


def _first_line(exc: AssertionError) -> str:
    return " ".join(str(exc).split("\nassert ")[0].split())[:500]  # without pytest's re-evaluation


# The state every case of `each` starts from (each case is rolled back to it), snapshotted once.
_baseline: dict[str, dict[str, tuple[int, str]]] = {}


@contextmanager
def writes_nothing() -> Iterator[None]:
    """The block's assertions, and that no ledger/artifacts row was written: both are reported."""
    before = _baseline.get("state") or snapshot()
    failure = None
    try:
        yield
    except AssertionError as exc:
        failure = _first_line(exc)
    changed = _changes(before, snapshot())
    problems = [p for p in (failure, f"and it wrote: {changed}" if changed else None) if p]
    assert not problems, "; ".join(problems)


def each(cases: Mapping[str, T], check: Callable[[T], None]) -> None:
    """Run `check` on every case, each in a savepoint rolled back afterwards; fail with them all."""
    failures = []
    _baseline["state"] = snapshot()
    try:
        for label, case in cases.items():
            auth._failures.clear()  # failed key checks from one address are throttled after 30
            point = transaction.savepoint()
            try:
                check(case)
            except AssertionError as exc:
                failures.append(f"[{label}] {_first_line(exc)}")
            finally:
                transaction.savepoint_rollback(point)
    finally:
        _baseline.clear()
    assert not failures, f"{len(failures)} of {len(cases)} cases mishandled:\n" + "\n".join(failures)


# --- sending and judging -------------------------------------------------------------------------


@cache
def shared_handler() -> ClientHandler:
    """One WSGI handler for every test client here: each new handler builds the middleware chain
    again, and WhiteNoise's part of that scans every static file (most of this module's time)."""
    return ClientHandler(enforce_csrf_checks=False)


def send(
    client: Client, method: str, path: str, body: bytes | str = b"", content_type: str | None = JSON, **headers: str
) -> Any:
    """One request in a savepoint. A server error that left PostgreSQL's transaction aborted is
    rolled back to it, so the test can still read the tables (the 5xx itself fails the test)."""
    client.raise_request_exception = False
    client.handler = shared_handler()
    extra = {} if content_type is None else {"CONTENT_TYPE": content_type}  # empty bodies carry it too
    point = transaction.savepoint()
    response = client.generic(method, path, body, content_type=content_type or "", headers=headers, **extra)
    if connection.connection.info.transaction_status == pq.TransactionStatus.INERROR:
        transaction.savepoint_rollback(point)
    else:
        transaction.savepoint_commit(point)
    return response


def shown(response: Any) -> str:
    return f"{response.status_code} {response.content[:300].decode('utf-8', 'replace')}"


def _names(text: str, mentions: Mentions) -> None:
    assert any(m.lower() in text.lower() for m in mentions), f"the answer names none of {mentions}: {text[:400]}"


def refused(response: Any, status: int | tuple[int, ...], code: str | None, mentions: Mentions = ()) -> Any:
    """A JSON `{error, code}` refusal whose text names at least one of `mentions`."""
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, f"expected {statuses}, got {shown(response)}"
    assert response["Content-Type"].startswith(JSON), shown(response)
    body = json.loads(response.content)
    if code is not None:
        assert body.get("code") == code, f"expected {code}: {body}"
    if mentions:
        _names(json.dumps(body, ensure_ascii=False), mentions)
    return body


def _rpc_message(response: Any) -> str:
    """The message of an OTLP error body, google.rpc.Status as JSON or as protobuf."""
    if response["Content-Type"].startswith(JSON):
        return str(json.loads(response.content)["message"])
    data, i, message = response.content, 0, b""
    while i < len(data):
        key, i = data[i], i + 1
        length = shift = 0
        while True:  # a varint: field 1's value, or field 2's length
            byte, i = data[i], i + 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if key & 7 == 2:
            message, i = data[i : i + length], i + length
    return message.decode()


def otlp_refused(response: Any, status: int, mentions: Mentions) -> None:
    assert response.status_code == status, f"expected {status}, got {shown(response)}"
    _names(_rpc_message(response), mentions)


def form_refused(response: Any, statuses: tuple[int, ...], mentions: Mentions) -> None:
    assert response.status_code in statuses, f"expected {statuses}, got {shown(response)}"
    _names(response.content.decode("utf-8", "replace"), mentions)


# --- hostile material ----------------------------------------------------------------------------


def nested_lists(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"{}" + b"}" * depth


def random_text(chars: int) -> str:
    """Incompressible text: TOAST cannot shrink it under an index row's size limit."""
    return secrets.token_hex(chars // 2 + 1)[:chars]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@cache
def gzip_bomb(inflated: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b"\0" * MiB
    return b"".join([*(compressor.compress(chunk) for _ in range(inflated // MiB)), compressor.flush()])


def padded(size: int, document: bytes) -> bytes:
    """`document` preceded by whitespace to exactly `size` bytes (still one valid JSON text)."""
    return b" " * (size - len(document)) + document


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def lookalikes(ref: str) -> dict[str, str]:
    """Strings that are not `ref`, and mostly not refs at all, but look like one."""
    body = ref[4:]
    return {
        "not-a-ref": "not-a-ref",
        "short": ref[:-1],
        "long": ref + "A",
        "trailing-newline": ref + "\n",
        "trailing-nul": ref + "\x00",
        "embedded-nul": ref[:10] + "\x00" + ref[11:],
        "cyrillic-a": "\u0430rt_" + body,
        "fullwidth-last-char": ref[:-1] + chr(ord(ref[-1]) + 0xFEE0),
        "upper-prefix": "ART_" + body,
        "swapped-case": "art_" + body.swapcase(),
        "zero-width-joiner": ref[:12] + "\u200d" + ref[12:],
        "combining-acute": ref + "\u0301",
        "10k-chars": "art_" + "A" * 10_000,
        "underscores": "art_" + "_" * 22,
        "percent-escapes": "art_" + "%41" * 22,
    }


# --- the endpoints -------------------------------------------------------------------------------


def event(seq: int, run_id: str = RUN, **changes: Any) -> dict[str, Any]:
    return {"seq": seq, "type": "test.hostile", "payload": {"n": seq}, "meta": {"runId": run_id}, **changes}


def recording(payload: Any = None, run_id: str = "rec-hostile", **run: Any) -> dict[str, Any]:
    return {
        "format": "agentfootprint.recording.v1",
        "run": {"runId": run_id, "firstRetainedEventIndex": 0, **run},
        "recording": {"events": [{"type": "test.hostile", "payload": payload or {}, "meta": {"runId": run_id}}]},
    }


def plain_ask(tool_call_id: str = "q1", run_id: str = "run-ask") -> dict[str, Any]:
    return {"runId": run_id, "pauseData": {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"}}


def artifact_body(**changes: Any) -> dict[str, Any]:
    return {"kind": "note", "mediaType": "text/plain", "payload": {"shape": "text", "value": "hi"}, **changes}


@dataclass(frozen=True)
class Target:
    path: str  # "{ask}" is replaced by an open ask's id
    limit: str  # the setting that states the body limit
    valid: Callable[[], Any]
    slotted: Callable[[], Any] | None = None  # a valid document holding SLOT where any JSON value goes
    scoped: bool = False  # artifact operations carry AF-Scope
    too_large_code: str = "ERR_TOO_LARGE"
    stores_slot: bool = False  # the free-form value is kept (and so must be kept exactly)


TARGETS = {
    "events": Target(
        "/api/v1/events",
        "FOOTPRINT_MAX_REQUEST_BYTES",
        lambda: {"events": [event(0)]},
        lambda: {"events": [event(0, payload="@@HOSTILE@@")]},
        stores_slot=True,
    ),
    "recordings": Target(
        "/api/v1/recordings",
        "FOOTPRINT_MAX_RECORDING_BYTES",
        recording,
        lambda: recording(payload="@@HOSTILE@@"),
        stores_slot=True,
    ),
    "asks": Target(
        "/api/v1/asks",
        "FOOTPRINT_MAX_RECORDING_BYTES",
        lambda: plain_ask("q2"),
        lambda: {**plain_ask("q2"), "checkpoint": "@@HOSTILE@@"},
        stores_slot=True,
    ),
    "ask-decision": Target(
        "/api/v1/asks/{ask}/decision",
        "FOOTPRINT_MAX_REQUEST_BYTES",
        lambda: {"by": "ops-bot", "value": "eu-west"},
        lambda: {"by": "ops-bot", "value": "@@HOSTILE@@"},
        stores_slot=True,
    ),
    "audit-bundles": Target(
        "/api/v1/audit-bundles",
        "FOOTPRINT_MAX_RECORDING_BYTES",
        lambda: load_fixture("f-audit/bundle.json"),
    ),
    "artifact-put": Target(
        "/api/v1/artifacts",
        "FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES",
        artifact_body,
        lambda: artifact_body(origin={"runId": "r1", "extra": "@@HOSTILE@@"}),
        scoped=True,
        too_large_code="ERR_INVALID_ARTIFACT",
    ),
    "artifact-resolve": Target(
        "/api/v1/wants:resolve",
        "FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES",
        lambda: {"toolName": "summarize", "wants": {"data": "dataset/rows"}, "args": {}},
        lambda: {"toolName": "summarize", "wants": {"data": "dataset/rows"}, "args": {"x": "@@HOSTILE@@"}},
        scoped=True,
    ),
}
SLOTTED = [name for name, target in TARGETS.items() if target.slotted]


@dataclass
class World:
    """An agent with every agent scope, an integration that decides asks, the agent's open ask, and a
    live artifact in AF_SCOPE."""

    agent: ApiClient
    integration: ApiClient
    ask_id: int
    ref: str

    def post(self, name: str, body: bytes | str, content_type: str | None = JSON, **headers: str) -> Any:
        target = TARGETS[name]
        if target.scoped:
            headers.setdefault("AF-Scope", AF_SCOPE)
        caller = self.integration if name == "ask-decision" else self.agent
        return send(caller, "POST", target.path.replace("{ask}", str(self.ask_id)), body, content_type, **headers)

    def post_slotted(self, name: str, hostile: bytes) -> Any:
        slotted = TARGETS[name].slotted
        assert slotted is not None
        text = dumps(slotted())
        assert text.count(SLOT) == 1
        return self.post(name, text.replace(SLOT, hostile))


def put_artifact(project: Any) -> str:
    spec = PutInput(kind="note", media_type="text/plain", payload={"shape": "text", "value": "evidence"})
    meta, _ = artifact_put(store=store_for_project(project=project), scope=Scope("t1", "p1", "c1"), spec=spec)
    return str(meta["ref"])


@pytest.fixture
def world(agent_client: ApiClient, integration_client: ApiClient, project: Any) -> World:
    agent_client.handler = integration_client.handler = shared_handler()
    opened = agent_client.post_json("/api/v1/asks", plain_ask())
    assert opened.status_code == 201, opened.content
    ask_id = opened.json()["ask"]["id"]
    return World(agent=agent_client, integration=integration_client, ask_id=ask_id, ref=put_artifact(project))


def django_user(client: Client) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=client.session["_auth_user_id"])


@pytest.fixture
def admin_client(django_user_model, project) -> Client:
    client = Client()
    client.force_login(person(django_user_model, "ada", project, Membership.Role.ADMIN))
    return client


# --- controls: the documents the hostile ones derive from are accepted ---------------------------


def test_the_valid_documents_behind_every_hostile_variant_are_accepted(world, settings):
    cases: dict[str, Callable[[], Any]] = {
        **{name: lambda name=name: world.post(name, dumps(TARGETS[name].valid())) for name in TARGETS},
        **{f"{name}-slot": lambda name=name: world.post_slotted(name, b'"plain"') for name in SLOTTED},
        "events-charset-utf8": lambda: world.post(
            "events", dumps(TARGETS["events"].valid()), "application/json; charset=utf-8"
        ),
        "events-exactly-the-limit": lambda: world.post(
            "events", padded(settings.FOOTPRINT_MAX_REQUEST_BYTES, dumps(TARGETS["events"].valid()))
        ),
        "otlp-json": lambda: send(world.agent, "POST", "/v1/traces", OTLP_FIXTURE),
    }

    def check(request: Callable[[], Any]) -> None:
        response = request()
        assert response.status_code in (200, 201), shown(response)

    each(cases, check)


# --- size limits ---------------------------------------------------------------------------------


def test_a_body_over_the_stated_limit_is_413_naming_it(world, settings):
    def check(name: str) -> None:
        target = TARGETS[name]
        limit = getattr(settings, target.limit)
        with writes_nothing():
            answer = refused(
                world.post(name, padded(limit + 1, dumps(target.valid()))), 413, target.too_large_code, (str(limit),)
            )
        assert answer.get("limit") == limit, answer

    each({name: name for name in TARGETS}, check)


def test_more_events_than_the_limit_is_413_naming_it(world, settings):
    limit = settings.FOOTPRINT_MAX_EVENTS_PER_REQUEST
    with writes_nothing():
        response = world.post("events", dumps({"events": [event(i) for i in range(limit + 1)]}))
        refused(response, 413, "ERR_TOO_LARGE", (f"at most {limit} events",))


def test_human_forms_refuse_oversized_bodies_and_field_floods_saying_so(admin_client, world, project, settings):
    """Django refuses these before any view runs; the answer must still say what was wrong."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    hold = artifact_hold_place(
        store=store_for_project(project=project), ref=world.ref, user=django_user(admin_client), reason="keep"
    )
    artifacts = f"/projects/{project.slug}/artifacts"
    forms = {
        "ask-decision": f"/asks/{world.ask_id}/decide/",
        "hold": f"{artifacts}/{world.ref}/hold/",
        "hold-release": f"{artifacts}/{world.ref}/holds/{hold.pk}/release/",
        "retention": f"{artifacts}/retention/",
    }
    oversized = "reason=" + "x" * limit
    flood = "&".join(f"f{i}=x" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    cases = {
        **{f"{name}-oversized": (path, oversized, (413,), (str(limit),)) for name, path in forms.items()},
        **{f"{name}-field-flood": (path, flood, (400, 413), ("fields",)) for name, path in forms.items()},
    }

    def check(case: tuple[str, str, tuple[int, ...], Mentions]) -> None:
        path, body, statuses, mentions = case
        with writes_nothing():
            form_refused(send(admin_client, "POST", path, body, FORM), statuses, mentions)

    each(cases, check)


# --- bodies that are not JSON, or JSON that parsers disagree on ----------------------------------

NOT_JSON: dict[str, tuple[bytes, Mentions]] = {
    "empty": (b"", ("empty",)),
    "invalid-utf8": (b'{"events":"\xff\xfe"}', ("utf-8",)),
    "lone-surrogate": (b'{"events":"\\ud800"}', ("surrogate",)),
    "bom": (b'\xef\xbb\xbf{"events":[]}', ("byte order mark",)),
    "nan": (b'{"events":NaN}', ("json",)),
    "infinity": (b'{"events":Infinity}', ("json",)),
    "minus-infinity": (b'{"events":-Infinity}', ("json",)),
    "1e400": (b'{"events":1e400}', ("infinity",)),
    "lists-10000-deep": (nested_lists(10_000), ("254 levels",)),
    "objects-10000-deep": (nested_objects(10_000), ("254 levels",)),
    "trailing-garbage": (b'{"events":[]} x', ("json",)),
    "truncated": (b'{"events":[{"seq":0', ("json",)),
}


@pytest.mark.parametrize("name", TARGETS)
def test_a_body_that_is_not_json_is_400_naming_the_problem(world, name):
    def check(case: tuple[bytes, Mentions]) -> None:
        body, mentions = case
        with writes_nothing():
            refused(world.post(name, body), 400, "ERR_MALFORMED_JSON", mentions)

    # A lone surrogate escape (half an emoji, as JSON.stringify writes it) is read by audit bundles,
    # which hash it, by event streams, as U+FFFD (tests/ledger/test_bundles_recordings_otlp_edges.py),
    # and by artifact bodies, as TextEncoder writes it (tests/artifacts/test_refs_named_like_routes_and_cut_text.py).
    reads_lone_surrogates = name == "audit-bundles" or name in EVENT_STREAMS or name in ARTIFACT_BODIES
    cases = {k: v for k, v in NOT_JSON.items() if not (reads_lone_surrogates and k == "lone-surrogate")}
    each(cases, check)


# Event streams are read as the framework's JavaScript reads them (a repeated key keeps its last
# value; only the canonical form of what was read is hashed); every other body refuses a repeat.
EVENT_STREAMS = ("events", "recordings")
ARTIFACT_BODIES = ("artifact-put", "artifact-resolve")


@pytest.mark.parametrize("name", [n for n in TARGETS if n not in EVENT_STREAMS])
def test_duplicate_keys_are_400_naming_the_key(world, name):
    document = TARGETS[name].valid()
    first = next(iter(document))
    value = document[first]
    decoy = value + "-decoy" if isinstance(value, str) else ([] if isinstance(value, list) else {})
    cases = {f"top-level-{first}": (b'{"' + first.encode() + b'":' + dumps(decoy) + b"," + dumps(document)[1:], first)}
    if TARGETS[name].slotted:
        cases["nested-in-a-value"] = (dumps(TARGETS[name].slotted()).replace(SLOT, b'{"k":1,"k":2}'), "k")

    def check(case: tuple[bytes, str]) -> None:
        body, key = case
        with writes_nothing():
            answer = refused(world.post(name, body), 400, "ERR_MALFORMED_JSON", ("duplicate",))
        assert f"'{key}'" in answer["error"] or f'"{key}"' in answer["error"], answer

    each(cases, check)


def test_an_event_stream_with_a_repeated_key_keeps_the_last_value_as_javascript_does(world):
    body = b'{"events":[{"seq":0,"type":"t","meta":{"runId":"run-a","runId":"run-b"}}]}'
    response = world.post("events", body)
    assert response.status_code == 200, response.content
    assert [r["runId"] for r in response.json()["runs"]] == ["run-b"]


PARSER_REFUSES: dict[str, tuple[bytes, Mentions]] = {
    "nan": (b"NaN", ("json",)),
    "infinity": (b"Infinity", ("json",)),
    "minus-infinity": (b"-Infinity", ("json",)),
    "1e400": (b"1e400", ("infinity",)),
    "minus-1e400": (b"-1e400", ("infinity",)),
    "invalid-utf8": (b'"\xff"', ("utf-8",)),
    "lone-surrogate": (b'"\\udfff"', ("surrogate",)),
    "lists-10000-deep": (nested_lists(10_000), ("254 levels",)),
    "objects-10000-deep": (nested_objects(10_000), ("254 levels",)),
}


@pytest.mark.parametrize("name", SLOTTED)
def test_a_hostile_value_inside_a_valid_document_is_refused(world, name):
    """Where any JSON value is allowed: the parser's refusals, then what it takes but cannot be kept."""
    cases: dict[str, tuple[bytes, tuple[int, ...], str | None, Mentions]] = {
        label: (value, (400,), "ERR_MALFORMED_JSON", mentions)
        for label, (value, mentions) in PARSER_REFUSES.items()
        if not (name in EVENT_STREAMS + ARTIFACT_BODIES and label == "lone-surrogate")  # read as U+FFFD: see above
    }
    cases |= {
        "lists-300-deep": (nested_lists(300), (400, 422), None, ("depth", "nest")),
        "lists-1000-deep": (nested_lists(1000), (400, 422), None, ("depth", "nest")),
        "objects-1000-deep": (nested_objects(1000), (400, 422), None, ("depth", "nest")),
    }

    def check(case: tuple[bytes, tuple[int, ...], str | None, Mentions]) -> None:
        value, statuses, code, mentions = case
        with writes_nothing():
            refused(world.post_slotted(name, value), statuses, code, mentions)

    each(cases, check)


def test_audit_bundle_nested_deeper_than_the_canonical_form_allows_is_a_4xx(world):
    """300 levels verify fine (the tampered record is stored with its verdict); 1,000 cannot be hashed."""
    bundle = load_fixture("f-audit/bundle.json")
    bundle["records"][0]["payload"] = "@@HOSTILE@@"
    with writes_nothing():
        response = world.post("audit-bundles", dumps(bundle).replace(SLOT, nested_lists(1000)))
        refused(response, (400, 422), None, ("depth", "nest"))


# --- content types, encodings, authorization -----------------------------------------------------

WRONG_TYPES: dict[str, str | None] = {
    "text/plain": "text/plain",
    "form-urlencoded": FORM,
    "multipart": "multipart/form-data; boundary=xyz",
    "xml": "application/xml",
    "none": None,
}


@pytest.mark.parametrize("name", TARGETS)
def test_a_wrong_content_type_or_encoding_is_415_naming_it(world, name):
    body = dumps(TARGETS[name].valid())
    cases: dict[str, Callable[[], tuple[Any, Mentions]]] = {
        label: lambda ct=ct: (world.post(name, body, ct), ("application/json",)) for label, ct in WRONG_TYPES.items()
    }
    cases["gzip-encoded"] = lambda: (
        world.post(name, gzip.compress(body), **{"Content-Encoding": "gzip"}),
        ("content-encoding",),
    )

    def check(request: Callable[[], tuple[Any, Mentions]]) -> None:
        with writes_nothing():
            response, mentions = request()
            refused(response, 415, None, mentions)

    each(cases, check)


MALFORMED_AUTH: dict[str, str | None] = {
    "absent": None,
    "empty": "",
    "scheme-only": "Bearer",
    "scheme-and-space": "Bearer ",
    "basic": "Basic dXNlcjpwYXNzd29yZA==",
    "token-scheme": "Token {key}",
    "trailing-word": "Bearer {key} extra",
    "nul-in-key": "Bearer {key}\x00",
    "latin1-key": "Bearer \xff\xfe\xfd",
    "64k-key": "Bearer " + "k" * 65536,
    "newline-in-key": "Bearer {key}\nX-Injected: 1",
    "key-twice": "Bearer {key}, Bearer {key}",
}


def authorization(world: World, template: str | None) -> dict[str, str]:
    """Headers carrying `template` with the world's real key in it (none when `template` is None)."""
    secret = world.agent.defaults["HTTP_AUTHORIZATION"].removeprefix("Bearer ")
    return {} if template is None else {"Authorization": template.replace("{key}", secret)}


@pytest.mark.parametrize("name", TARGETS)
def test_a_malformed_authorization_header_is_401(world, client, name):
    target = TARGETS[name]
    path = target.path.replace("{ask}", str(world.ask_id))

    def check(template: str | None) -> None:
        headers = authorization(world, template)
        with writes_nothing():
            response = send(client, "POST", path, dumps(target.valid()), AF_Scope=AF_SCOPE, **headers)
            refused(response, 401, "ERR_UNAUTHENTICATED", ("authorization: bearer",))
        assert response["WWW-Authenticate"].startswith("Bearer")

    each(MALFORMED_AUTH, check)


def test_a_malformed_authorization_header_is_401_on_otlp_and_artifact_delete(world, client):
    def check(template: str | None) -> None:
        headers = authorization(world, template)
        with writes_nothing():
            otlp_refused(send(client, "POST", "/v1/traces", OTLP_FIXTURE, **headers), 401, ("authorization: bearer",))
            response = send(client, "DELETE", f"/api/v1/artifacts/{world.ref}", AF_Scope=AF_SCOPE, **headers)
            refused(response, 401, "ERR_UNAUTHENTICATED")

    each(MALFORMED_AUTH, check)


def test_authorization_variants_rfc_7235_allows_are_accepted_everywhere(world, client):
    cases = {"lower-case-scheme": "bearer {key}", "two-spaces": "Bearer  {key}"}

    def check(template: str) -> None:
        headers = authorization(world, template)
        api = send(client, "POST", "/api/v1/events", dumps({"events": [event(0)]}), **headers)
        otlp = send(client, "POST", "/v1/traces", OTLP_FIXTURE, **headers)
        assert (api.status_code, otlp.status_code) == (200, 200), f"API {shown(api)}; OTLP {shown(otlp)}"

    each(cases, check)


# --- events: the batch is one unit ---------------------------------------------------------------

BAD_THIRD_EVENT: dict[str, tuple[Any, int, str]] = {
    "missing-run-id": (event(2) | {"meta": {}}, 422, "meta.runId"),
    "seq-2**70": (event(2) | {"seq": 2**70}, 422, "seq"),
    "seq-negative": (event(-1), 422, "seq"),
    "seq-fraction": (event(2) | {"seq": 2.5}, 422, "seq"),
    "seq-true": (event(2) | {"seq": True}, 422, "seq"),
    "wall-clock-2**70": (event(2) | {"meta": {"runId": RUN, "wallClockMs": 2**70}}, 422, "wallClockMs"),
    "type-10k": (event(2) | {"type": "t" * 10_000}, 422, "type"),
    "run-id-10k": (event(2, "r" * 10_000), 422, "meta.runId"),
    "session-id-list": (event(2) | {"meta": {"runId": RUN, "sessionId": []}}, 422, "meta.sessionId"),
    "unknown-envelope-key": (event(2) | {"evil": 1}, 422, "evil"),
    "not-an-object": ([1, 2, 3], 422, "object"),
    "run-id-nul": (event(2, "run\x00hostile"), 422, "meta.runId"),
    "session-id-nul": (event(2) | {"meta": {"runId": RUN, "sessionId": "s\x00"}}, 422, "meta.sessionId"),
    "tenant-nul": (event(2) | {"meta": {"runId": RUN, "tenant": "\x00"}}, 422, "meta.tenant"),
    "type-nul": (event(2) | {"type": "test\x00hostile"}, 422, "type"),
    "conflicting-seq": (event(1) | {"payload": {"n": "different"}}, 409, "seq"),
}


def test_a_batch_whose_third_event_is_bad_stores_none_of_the_five(world):
    def check(case: tuple[Any, int, str]) -> None:
        bad, status, field = case
        with writes_nothing():
            response = world.post("events", dumps({"events": [event(0), event(1), bad, event(3), event(4)]}))
            answer = refused(response, status, None, (field,))
        problems = answer.get("errors") or answer.get("conflicts") or []
        assert any(p.get("index") == 2 for p in problems), f"index 2 is not named: {answer}"

    each(BAD_THIRD_EVENT, check)


def test_an_integer_beyond_64_bits_is_kept_as_the_double_javascript_reads(world):
    body = dumps({"events": [event(0, payload="@@HOSTILE@@")]}).replace(SLOT, BIG_INT.encode())
    assert world.post("events", body).status_code == 200
    stored = RunEvent.objects.get(run__run_id=RUN, seq=0)
    assert orjson.loads(stored.body)["payload"] == float(2**70)
    assert stored.doc["payload"] == float(2**70)


def test_a_batch_whose_third_event_cannot_be_kept_exactly_stores_none_of_the_five(world):
    body = dumps({"events": [event(0), event(1), event(2, payload="@@HOSTILE@@"), event(3), event(4)]})
    cases = {
        "payload-600-deep": (nested_lists(600), ("depth", "nest")),
        "payload-nan": (b"NaN", ("json",)),
    }

    def check(case: tuple[bytes, Mentions]) -> None:
        value, mentions = case
        with writes_nothing():
            refused(world.post("events", body.replace(SLOT, value)), (400, 422), None, mentions)

    each(cases, check)


def test_a_bad_batch_for_an_existing_run_leaves_the_run_as_it_was(world):
    first = world.post("events", dumps({"events": [event(0), event(1)]}))
    assert first.status_code == 200, shown(first)
    cases = {
        "nul-run-id": (event(4, "other\x00run"), "meta.runId"),
        "missing-meta": (event(4) | {"meta": None}, "meta"),
        "conflicting-seq": (event(1) | {"payload": {"changed": True}}, "seq"),
    }

    def check(case: tuple[Any, str]) -> None:
        bad, field = case
        with writes_nothing():
            response = world.post("events", dumps({"events": [event(2), event(3), bad, event(5), event(6)]}))
            refused(response, (409, 422), None, (field,))

    each(cases, check)


def test_free_form_u0000_in_an_event_is_kept_or_refused_never_a_5xx(world):
    """Valid envelopes whose payloads hold U+0000, including a pause that opens an ask: the server
    keeps them (the queryable copies carry U+FFFD) or refuses them whole, naming the field."""
    cases = {
        "payload-string": event(0, payload="a\x00b"),
        "payload-key": event(0, payload={"k\x00": 1}),
        "pause-tool-call-id": event(
            0, type=PAUSE, payload={"questionPayload": {"toolCallId": "c\x00", "question": "?"}}
        ),
        "pause-question": event(0, type=PAUSE, payload={"questionPayload": {"toolCallId": "c1", "question": "\x00"}}),
        "tool-start-call-id": event(0, type=TOOL_START, payload={"toolName": "t\x00", "toolCallId": "c\x00"}),
        "tool-end-call-id": event(0, type=TOOL_END, payload={"toolCallId": "c\x00", "result": "\x00"}),
        "decision-call-id": event(
            0,
            type="agentfootprint.middleware.decision",
            payload={"middleware": "m\x00", "moment": "before-tool", "outcome": "deny", "toolCallId": "c\x00"},
        ),
        "composition-path": event(0, meta={"runId": RUN, "compositionPath": ["Agent:\x00"]}),
    }

    def check(bad: dict[str, Any]) -> None:
        before = snapshot()
        response = world.post("events", dumps({"events": [bad]}))
        assert response.status_code in (200, 422), shown(response)
        if response.status_code == 422:
            assert snapshot() == before, "a refused batch wrote"

    each(cases, check)


def test_shapeless_batches_are_422_naming_the_problem(world):
    cases = {
        "empty-events": ({"events": []}, "empty"),
        "events-object": ({"events": {}}, "events"),
        "top-level-array": ([], "events"),
        "top-level-string": ("events", "events"),
        "extra-top-level-key": ({"events": [event(0)], "extra": 1}, "extra"),
    }

    def check(case: tuple[Any, str]) -> None:
        document, mention = case
        with writes_nothing():
            refused(world.post("events", dumps(document)), 422, "ERR_INVALID_EVENTS", (mention,))

    each(cases, check)


# --- recordings, asks, decisions, audit bundles --------------------------------------------------


def test_a_malformed_recording_is_422_naming_the_field(world):
    third_bad = recording()
    good = third_bad["recording"]["events"][0]
    third_bad["recording"]["events"] = [good, good, {"type": "", "meta": {"runId": "rec-hostile"}}, good, good]
    cases = {
        "no-run": ({"format": "agentfootprint.recording.v1"}, "run.runId"),
        "format-v2": (recording() | {"format": "agentfootprint.recording.v2"}, "format"),
        "first-index-2**70": (recording(firstRetainedEventIndex=2**70), "firstRetainedEventIndex"),
        "first-index-2**40": (recording(firstRetainedEventIndex=2**40), ("firstRetainedEventIndex", "seq")),
        "first-index-negative": (recording(firstRetainedEventIndex=-1), "firstRetainedEventIndex"),
        "run-id-10k": (recording(run_id="r" * 10_000), "runId"),
        "run-id-nul": (recording(run_id="rec\x00hostile"), "runId"),
        "events-carry-seq": (
            recording() | {"recording": {"events": [{"seq": 0, "type": "t", "meta": {"runId": "rec-hostile"}}]}},
            "seq",
        ),
        "third-event-bad": (third_bad, "type"),
    }

    def check(case: tuple[Any, str | Mentions]) -> None:
        document, field = case
        with writes_nothing():
            refused(world.post("recordings", dumps(document)), 422, None, (field,) if isinstance(field, str) else field)

    each(cases, check)


def test_a_malformed_ask_is_422_naming_the_field(world):
    def ask(run_id: str = "r", tool_call_id: str = "q", **changes: Any) -> dict[str, Any]:
        return {"runId": run_id, "pauseData": {"toolCallId": tool_call_id}, **changes}

    cases = {
        "no-run-id": ({"pauseData": {"toolCallId": "q"}}, "runId"),
        "empty-run-id": (ask(""), "runId"),
        "empty-tool-call-id": (ask(tool_call_id=""), "toolCallId"),
        "pause-data-string": (ask(pauseData="x"), "pauseData"),
        "unknown-field": (ask(evil=1), "evil"),
        "on-timeout": (ask(onTimeout="explode"), "onTimeout"),
        "deadline-words": (ask(deadline="tomorrow"), "deadline"),
        "deadline-impossible-date": (ask(deadline="2026-13-45T25:61:00Z"), "deadline"),
        "deadline-without-zone": (ask(deadline="2026-12-01T09:00:00"), "deadline"),
        "deadline-number": (ask(deadline=2**70), "deadline"),
        "deadline-year-0": (ask(deadline="0000-01-01T00:00:00Z"), "deadline"),
        "run-id-10k": (ask(random_text(10_000)), "runId"),
        "tool-call-id-10k": (ask(tool_call_id=random_text(10_000)), "toolCallId"),
        "run-id-nul": (ask("r\x00"), "runId"),
        "tool-call-id-nul": (ask(tool_call_id="q\x00"), "toolCallId"),
        "session-id-nul": (ask(sessionId="s\x00"), "sessionId"),
        "question-nul": (ask(pauseData={"toolCallId": "q", "question": "why\x00"}), "question"),
    }

    def check(case: tuple[Any, str]) -> None:
        document, field = case
        with writes_nothing():
            refused(world.post("asks", dumps(document)), 422, "ERR_INVALID_ASK", (field,))

    each(cases, check)


def test_an_ask_whose_checkpoint_is_not_an_object_is_refused_or_still_renders(world, approver_client):
    """The checkpoint is "stored verbatim"; one that is not an object must not break the ask page
    for the people who decide it (refused at the door, 422 naming checkpoint, or shown)."""
    cases = {"string": "<see ask-checkpoint.json>", "number": 5, "array": [1], "true": True}

    def check(checkpoint: Any) -> None:
        before = snapshot()
        response = world.post("asks", dumps({**plain_ask("q-checkpoint"), "checkpoint": checkpoint}))
        if response.status_code == 422:
            _names(response.content.decode(), ("checkpoint",))
            assert snapshot() == before
            return
        assert response.status_code == 201, shown(response)
        page = send(approver_client, "GET", f"/asks/{response.json()['ask']['id']}/")
        assert page.status_code == 200, f"the ask page: {shown(page)}"

    each(cases, check)


def test_a_malformed_api_decision_is_422_naming_the_field(world):
    cases = {
        "empty": ({}, "by"),
        "array": ([], "by"),
        "blank-by": ({"by": "   "}, "by"),
        "by-number": ({"by": 5}, "by"),
        "approved-string": ({"by": "ops", "approved": "yes"}, "approved"),
        "note-number": ({"by": "ops", "note": 5}, "note"),
        "by-10k": ({"by": random_text(10_000)}, "by"),
        "note-100k": ({"by": "ops", "note": "n" * 100_000}, "note"),
        "by-nul": ({"by": "ops\x00bot"}, "by"),
        "note-nul": ({"by": "ops", "note": "a\x00b"}, "note"),
        "value-nul": ({"by": "ops", "value": "a\x00b"}, "value"),
    }

    def check(case: tuple[Any, str]) -> None:
        document, field = case
        with writes_nothing():
            refused(world.post("ask-decision", dumps(document)), 422, "ERR_INVALID_ASK", (field,))

    each(cases, check)


def test_a_decision_for_an_impossible_ask_id_is_404_or_422(world):
    def check(ask_id: str) -> None:
        with writes_nothing():
            response = send(world.integration, "POST", f"/api/v1/asks/{ask_id}/decision", dumps({"by": "ops"}))
        answer = refused(response, (404, 422), None)
        assert answer["code"] in ("ERR_ASK_NOT_FOUND", "ERR_INVALID_PARAMETERS"), answer

    each({v: v for v in ("0", "-1", str(2**63), str(2**70), "1e3", "abc", "%00", "1%00")}, check)


def test_a_shapeless_audit_bundle_is_422(world):
    documents = {
        "object": {},
        "list": [],
        "list-of-number": [1],
        "no-segments": {"segments": []},
        "segment-number": {"segments": [1]},
        "header-string": {"header": "x"},
        "string": "bundle",
        "number": 5,
        "null": None,
    }

    def check(document: Any) -> None:
        with writes_nothing():
            refused(world.post("audit-bundles", dumps(document)), 422, "ERR_INVALID_AUDIT_BUNDLE", ("header",))

    each(documents, check)


def test_an_audit_bundle_with_u0000_is_kept_or_refused_never_a_5xx(world):
    """Bundles are kept byte for byte with their verdict; U+0000 must not break the import."""

    def bundle(where: str) -> dict[str, Any]:
        document = load_fixture("f-audit/bundle.json")
        if where == "chain-head":
            document["header"]["chainHead"] = "\x00" * 64
        elif where == "final-hash":
            document["finalHash"] = "\x00"
        else:
            document["records"][0]["meta"]["runId"] = "run\x00"
        return document

    def check(where: str) -> None:
        before = snapshot()
        response = world.post("audit-bundles", dumps(bundle(where)))
        assert response.status_code in (201, 422), shown(response)
        if response.status_code == 422:
            assert snapshot() == before, "a refused bundle wrote"

    each({w: w for w in ("chain-head", "final-hash", "record-run-id")}, check)


# --- artifacts: AF-Scope, refs, puts -------------------------------------------------------------

MALFORMED_SCOPES: dict[str, str | None] = {
    "absent": None,
    "empty": "",
    "not-base64": "!!!$$$",
    "base64-of-text": b64(b"hello"),
    "base64-of-array": b64(b"[]"),
    "base64-of-null": b64(b"null"),
    "tenant-number": b64(b'{"tenant":5,"conversationId":"c"}'),
    "unknown-field": b64(b'{"conversationId":"c","admin":true}'),
    "nul-escape-in-conversation": b64(b'{"conversationId":"c\\u0000"}'),
    "conversation-1025-chars": b64(dumps({"conversationId": "c" * 1025})),
    "invalid-utf8": b64(b'{"conversationId":"\xff"}'),
    "lone-surrogate": b64(b'{"conversationId":"\\ud800"}'),
    "nested-10000": b64(nested_objects(10_000)),
    "non-ascii-header": "é" * 8,
    "duplicate-key": b64(b'{"conversationId":"c1","conversationId":"c2"}'),
    "100k-header": "A" * 100_000,
}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/v1/artifacts", dumps(artifact_body())),
        ("POST", "/api/v1/wants:resolve", dumps(TARGETS["artifact-resolve"].valid())),
        ("DELETE", "/api/v1/artifacts/{ref}", b""),
        ("GET", "/api/v1/artifacts", b""),
        ("GET", "/api/v1/artifacts/{ref}", b""),
        ("GET", "/api/v1/artifacts/{ref}/meta", b""),
    ],
    ids=["put", "resolve", "delete", "list", "get", "head"],
)
def test_a_malformed_af_scope_is_400_and_never_echoed(world, method, path, body):
    def check(value: str | None) -> None:
        headers = {} if value is None else {"AF-Scope": value}
        with writes_nothing():
            response = send(world.agent, method, path.replace("{ref}", world.ref), body, **headers)
            refused(response, 400, "ERR_INVALID_SCOPE", ("af-scope", "scope"))
        if value and len(value) > 3:
            assert value.encode() not in response.content, "the answer echoes the scope"

    each(MALFORMED_SCOPES, check)


def test_a_refused_artifact_request_does_not_create_the_projects_store(agent_client, project):
    """The project's store is created lazily; a request refused for its scope must not create it."""
    assert not ArtifactStore.objects.filter(project=project).exists()
    with writes_nothing():
        response = send(agent_client, "POST", "/api/v1/artifacts", dumps(artifact_body()), AF_Scope="!!!")
        refused(response, 400, "ERR_INVALID_SCOPE")


def test_a_malformed_or_lookalike_ref_gets_the_one_404_from_get_and_head(world):
    missing = "art_" + "Z" * 22

    def check(ref: str) -> None:
        displayed = ref if len(ref) <= 64 else ref[:61] + "…"
        with writes_nothing():
            for suffix in ("", "/meta"):
                path = f"/api/v1/artifacts/{quote(ref, safe='')}{suffix}"
                answer = refused(send(world.agent, "GET", path, AF_Scope=AF_SCOPE), 404, "ERR_ARTIFACT_NOT_FOUND")
                expected = send(world.agent, "GET", f"/api/v1/artifacts/{missing}{suffix}", AF_Scope=AF_SCOPE).json()
                assert answer["error"].replace(displayed, "REF", 1) == expected["error"].replace(missing, "REF", 1)
                assert {**answer, "error": ""} == {**expected, "error": ""}

    each(lookalikes(world.ref), check)


def test_deleting_a_malformed_or_lookalike_ref_is_a_no_op(world):
    def check(ref: str) -> None:
        with writes_nothing():
            response = send(world.agent, "DELETE", f"/api/v1/artifacts/{quote(ref, safe='')}", AF_Scope=AF_SCOPE)
            assert response.status_code == 204, shown(response)
        assert Artifact.objects.filter(ref=world.ref, deleted_at__isnull=True).exists()

    each(lookalikes(world.ref), check)


def test_a_malformed_artifact_put_is_422_naming_the_field(world):
    cases = {
        "expires-string": ({"expiresAt": "soon"}, "expiresAt"),
        "expires-true": ({"expiresAt": True}, "expiresAt"),
        "expires-past": ({"expiresAt": 1}, "expiresAt"),
        "kind-empty": ({"kind": ""}, "kind"),
        "kind-nul": ({"kind": "k\x00"}, "kind"),
        "media-type-blank": ({"mediaType": " \t"}, "mediaType"),
        "label-nul": ({"label": "l\x00"}, "label"),
        "label-number": ({"label": 5}, "label"),
        "origin-nul": ({"origin": {"runId": "r\x00"}}, "origin"),
        "origin-string": ({"origin": "run-1"}, "origin"),
        "digest-md5": ({"digest": "md5"}, "digest"),
        "parent-refs-string": ({"parentRefs": "art_x"}, "parentRefs"),
        "parent-ref-newline": ({"parentRefs": ["art_" + "c" * 22 + "\n"]}, "parentRefs"),
        "parent-ref-cyrillic": ({"parentRefs": ["\u0430rt_" + "c" * 22]}, "parentRefs"),
        "parent-ref-nul": ({"parentRefs": ["x\x00"]}, "parentRefs"),
        "json-nan": ({"payload": {"shape": "json", "value": "NaN"}}, "payload.value"),
        "json-10000-deep": ({"payload": {"shape": "json", "value": nested_lists(10_000).decode()}}, "payload.value"),
        "binary-not-base64": ({"payload": {"shape": "binary", "value": "not base64!"}}, "payload.value"),
        "text-number": ({"payload": {"shape": "text", "value": 5}}, "payload.value"),
        "shape-unknown": ({"payload": {"shape": "exe", "value": "x"}}, "payload.shape"),
        "payload-extra-key": ({"payload": {"shape": "text", "value": "x", "extra": 1}}, "payload"),
        "unknown-field": ({"evil": 1}, "evil"),
    }

    def check(case: tuple[dict[str, Any], str]) -> None:
        changes, field = case
        with writes_nothing():
            refused(world.post("artifact-put", dumps(artifact_body(**changes))), 422, None, (field,))

    each(cases, check)


def test_an_artifact_put_with_a_far_expiry_is_clamped_or_refused_never_a_5xx(world, project):
    """With the store's ceilings a far expiresAt is clamped; without them it must still fit."""
    store = store_for_project(project=project)

    def check(case: tuple[bool, float | int]) -> None:
        ceilings, expires_at = case
        if not ceilings:
            ArtifactStore.objects.filter(pk=store.pk).update(ttl_ms=None, max_ttl_ms=None)
        before = snapshot()
        response = world.post("artifact-put", dumps(artifact_body(expiresAt=expires_at)))
        assert response.status_code in (201, 422), shown(response)
        if response.status_code == 422:
            _names(response.content.decode(), ("expiresAt",))
            assert snapshot() == before
        elif ceilings:
            meta = response.json()["meta"]
            assert meta["expiresAt"] <= meta["createdAt"] + store.max_ttl_ms

    each(
        {
            f"{'ceilings' if ceilings else 'no-ceilings'}-{label}": (ceilings, value)
            for ceilings in (True, False)
            for label, value in (("2**63", 2**63), ("2**70", 2**70), ("1e300", 1e300))
        },
        check,
    )


# --- OTLP/HTTP -----------------------------------------------------------------------------------


def otlp(world: World, body: bytes, content_type: str | None = JSON, **headers: str) -> Any:
    return send(world.agent, "POST", "/v1/traces", body, content_type, **headers)


def otlp_span(**changes: Any) -> bytes:
    document = json.loads(OTLP_FIXTURE)
    scope_spans = document["resourceSpans"][0]["scopeSpans"][0]
    scope_spans["spans"] = [{**scope_spans["spans"][0], **changes}]
    return dumps(document)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    out, length = bytearray([(field << 3) | 2]), len(payload)
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + payload


def protobuf_span(attribute_value: bytes, name: bytes = b"n") -> bytes:
    """ExportTraceServiceRequest{resourceSpans{scopeSpans{spans{traceId, spanId, name, attributes}}}}."""
    attribute = _ld(1, b"k") + _ld(2, attribute_value)
    span = _ld(1, bytes(range(1, 17))) + _ld(2, bytes(range(1, 9))) + _ld(5, name) + _ld(9, attribute)
    return _ld(1, _ld(2, _ld(2, span)))


def nested_any_value(depth: int) -> bytes:
    value = _ld(1, b"leaf")  # AnyValue{string_value}
    for _ in range(depth):
        value = _ld(5, _ld(1, value))  # AnyValue{array_value: ArrayValue{values: [value]}}
    return value


def test_otlp_bodies_over_the_limit_are_413_before_and_after_gunzip(world, settings):
    limit = settings.FOOTPRINT_MAX_REQUEST_BYTES
    bomb = gzip_bomb(64 * MiB)
    assert len(bomb) < limit // 50
    gz = {"Content-Encoding": "gzip"}
    cases: dict[str, tuple[Callable[[], Any], Mentions]] = {
        "raw": (lambda: otlp(world, padded(limit + 1, OTLP_FIXTURE)), (str(limit),)),
        "gzip-bomb-json": (lambda: otlp(world, bomb, **gz), ("gunzip",)),
        "gzip-bomb-protobuf": (lambda: otlp(world, bomb, PROTOBUF, **gz), ("gunzip",)),
        "many-member-gzip-bomb": (lambda: otlp(world, gzip_bomb(MiB) * (limit // MiB + 2), **gz), ("gunzip",)),
    }

    def check(case: tuple[Callable[[], Any], Mentions]) -> None:
        request, mentions = case
        with writes_nothing():
            otlp_refused(request(), 413, mentions)

    each(cases, check)


def test_otlp_transport_problems_are_400_or_415_naming_them(world):
    gz = {"Content-Encoding": "gzip"}
    cases: dict[str, tuple[Callable[[], Any], int, Mentions]] = {
        "gzip-truncated": (lambda: otlp(world, gzip.compress(OTLP_FIXTURE)[:-20], **gz), 400, ("truncated",)),
        "gzip-declared-not-gzip": (lambda: otlp(world, OTLP_FIXTURE, **gz), 400, ("gzip",)),
        "gzip-bad-header": (lambda: otlp(world, b"\x1f\x8b\x08\x00garbage", **gz), 400, ("gzip",)),
        **{
            f"encoding-{enc}": (
                lambda enc=enc: otlp(world, OTLP_FIXTURE, **{"Content-Encoding": enc}),
                415,
                ("content-encoding",),
            )
            for enc in ("deflate", "br", "zstd", "gzip, gzip", "x-gzip")
        },
        **{
            f"type-{label}": (lambda ct=ct: otlp(world, OTLP_FIXTURE, ct), 415, ("content-type",))
            for label, ct in WRONG_TYPES.items()
        },
    }

    def check(case: tuple[Callable[[], Any], int, Mentions]) -> None:
        request, status, mentions = case
        with writes_nothing():
            otlp_refused(request(), status, mentions)

    each(cases, check)


def test_otlp_json_that_does_not_decode_is_400_naming_the_problem(world):
    kvlist_300_deep = b'{"kvlistValue":{"values":[{"key":"k","value":' * 300 + b'{"stringValue":"x"}' + b"}]}}" * 300
    cases: dict[str, tuple[bytes, Mentions]] = {
        "empty": (b"", ("empty", "json")),
        "invalid-utf8": (b'{"resourceSpans":"\xff"}', ("utf-8",)),
        "nan": (b'{"resourceSpans":NaN}', ("json",)),
        "1e400": (b'{"resourceSpans":[{"x":1e400}]}', ("infinity",)),
        "lists-10000-deep": (nested_lists(10_000), ("254 levels",)),
        "objects-10000-deep": (nested_objects(10_000), ("254 levels",)),
        "array": (b"[]", ("resourceSpans",)),
        "start-time-2**70": (otlp_span(startTimeUnixNano=BIG_INT), ("startTimeUnixNano", "int")),
        "int-value-2**70-string": (otlp_span(attributes=[{"key": "k", "value": {"intValue": BIG_INT}}]), ("int",)),
        "int-value-2**70-number": (otlp_span(attributes=[{"key": "k", "value": {"intValue": 2**70}}]), ("int",)),
        "attributes-300-deep": (
            otlp_span(attributes=[{"key": "k", "value": "@@HOSTILE@@"}]).replace(SLOT, kvlist_300_deep),
            ("deep", "depth", "recursion"),
        ),
    }

    def check(case: tuple[bytes, Mentions]) -> None:
        body, mentions = case
        with writes_nothing():
            otlp_refused(otlp(world, body), 400, mentions)

    each(cases, check)


def test_otlp_protobuf_that_does_not_decode_is_400_naming_protobuf(world):
    cases = {
        "garbage": b"\xff\xff\xff\xff",
        "length-past-the-end": b"\x0a\xff\xff\xff\xff\x0f",
        "any-value-10000-deep": protobuf_span(nested_any_value(10_000)),
        "invalid-utf8-span-name": protobuf_span(_ld(1, b"ok"), name=b"bad \xff\xfe utf-8"),
    }

    def check(body: bytes) -> None:
        with writes_nothing():
            otlp_refused(otlp(world, body, PROTOBUF), 400, ("protobuf",))

    each(cases, check)


def test_otlp_spans_with_bad_ids_are_rejected_as_a_partial_success(world):
    cases = {
        "trace-id-not-hex": ({"traceId": "zz" * 16}, "traceId"),
        "trace-id-zero": ({"traceId": "00" * 16}, "traceId"),
        "trace-id-short": ({"traceId": "ab" * 8}, "traceId"),
        "span-id-cyrillic": ({"spanId": "\u0430" * 16}, "spanId"),
        "parent-span-id-short": ({"parentSpanId": "ab"}, "parentSpanId"),
        "end-after-2262": ({"endTimeUnixNano": str(2**64 - 1)}, "endTimeUnixNano"),
    }

    def check(case: tuple[dict[str, Any], str]) -> None:
        changes, field = case
        with writes_nothing():
            response = otlp(world, otlp_span(**changes))
        assert response.status_code == 200, shown(response)
        partial = json.loads(response.content)["partialSuccess"]
        assert int(partial["rejectedSpans"]) == 1, partial
        _names(partial["errorMessage"], (field,))

    each(cases, check)


def test_an_otlp_request_with_one_bad_span_of_five_keeps_the_other_four(world):
    """OTLP/HTTP's own rule, unlike the event API's all-or-nothing batch: the bad span is rejected
    and named in partialSuccess, the valid ones are stored."""
    document = json.loads(OTLP_FIXTURE)
    scope_spans = document["resourceSpans"][0]["scopeSpans"][0]
    scope_spans["spans"] = scope_spans["spans"][:5]
    scope_spans["spans"][2] = {**scope_spans["spans"][2], "traceId": "zz" * 16}
    before = OtlpSpan.objects.count()
    response = otlp(world, dumps(document))
    assert response.status_code == 200, shown(response)
    partial = json.loads(response.content)["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    _names(partial["errorMessage"], ("spans[2]",))
    assert OtlpSpan.objects.count() == before + 4


# --- human forms ---------------------------------------------------------------------------------


@pytest.fixture
def consent_ask(world) -> int:
    """An approve/decline ask (the world's ask is a plain question that takes an answer)."""
    outcome = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
    checkpoint = load_fixture("b-middleware/ask-checkpoint.json")
    response = world.agent.post_json("/api/v1/asks", {**outcome, "checkpoint": checkpoint, "runId": "run-consent"})
    assert response.status_code == 201, response.content
    return int(response.json()["ask"]["id"])


# Django's own messages: the page must show the one for the field that is wrong.
REQUIRED = "This field is required"
NUL = "Null characters are not allowed"


def test_an_invalid_ask_decision_form_is_422_naming_the_field(approver_client, world):
    json_value = "decision=answer&value_is_json=on&value="
    cases: dict[str, tuple[str, Mentions]] = {
        "empty": ("", (REQUIRED,)),
        "unknown-decision": ("decision=explode", ("Select a valid choice",)),
        "approve-a-question": ("decision=approve", ("takes an answer",)),
        "value-100001": ("decision=answer&value=" + "v" * 100_001, ("at most 100000 characters",)),
        "note-2001": ("decision=answer&value=eu&note=" + "n" * 2001, ("at most 2000 characters",)),
        "note-nul": ("decision=answer&value=eu&note=a%00b", (NUL,)),
        "value-nul": ("decision=answer&value=a%00b", (NUL,)),
        "json-nan": (json_value + "NaN", ("not valid JSON",)),
        "json-10000-deep": (json_value + quote(nested_lists(10_000)), ("254 levels",)),
        "json-600-deep": (json_value + quote(nested_lists(600)), ("depth", "nest")),
        "json-nul-escape": (json_value + quote('"a\\u0000b"'), ("null", "u+0000")),
        "json-duplicate-key": (json_value + quote('{"k":1,"k":2}'), ("duplicate",)),
        "note-invalid-utf8": ("decision=answer&value=eu&note=%FF%FE", ("utf-8",)),
    }

    def check(case: tuple[str, Mentions]) -> None:
        body, mentions = case
        with writes_nothing():
            form_refused(
                send(approver_client, "POST", f"/asks/{world.ask_id}/decide/", body, FORM), (400, 422), mentions
            )

    each(cases, check)


def test_an_ask_decision_form_in_the_wrong_content_type_decides_nothing(approver_client, consent_ask):
    cases = {
        "json": (JSON, dumps({"decision": "approve"})),
        "text-plain": ("text/plain", "decision=approve"),
        "no-content-type": (None, "decision=approve"),
    }

    def check(case: tuple[str | None, bytes | str]) -> None:
        content_type, body = case
        with writes_nothing():
            response = send(approver_client, "POST", f"/asks/{consent_ask}/decide/", body, content_type)
        form_refused(response, (415, 422), (REQUIRED, FORM))

    each(cases, check)


def test_a_decision_form_for_an_impossible_ask_is_404(approver_client, world):
    def check(ask_id: str) -> None:
        with writes_nothing():
            response = send(approver_client, "POST", f"/asks/{ask_id}/decide/", "decision=approve", FORM)
        assert response.status_code == 404, shown(response)

    each({v: v for v in (str(2**63), str(2**70), "0")}, check)


def test_an_invalid_hold_form_is_422_naming_the_field(auditor_client, world, project):
    cases: dict[str, tuple[str, Mentions]] = {
        "empty": ("", (REQUIRED,)),
        "reason-501": ("reason=" + "r" * 501, ("at most 500 characters",)),
        "reason-nul": ("reason=a%00b", (NUL,)),
        "reason-invalid-utf8": ("reason=%FF%FE", ("utf-8",)),
    }

    def check(case: tuple[str, Mentions]) -> None:
        body, mentions = case
        path = f"/projects/{project.slug}/artifacts/{world.ref}/hold/"
        with writes_nothing():
            form_refused(send(auditor_client, "POST", path, body, FORM), (400, 422), mentions)

    each(cases, check)


def test_holding_a_ref_that_is_malformed_lookalike_or_absent_is_404(auditor_client, world, project):
    def check(ref: str) -> None:
        path = f"/projects/{project.slug}/artifacts/{quote(ref, safe='')}/hold/"
        with writes_nothing():
            response = send(auditor_client, "POST", path, "reason=evidence", FORM)
        assert response.status_code == 404, shown(response)

    each({**lookalikes(world.ref), "well-formed-absent": "art_" + "Q" * 22}, check)


def test_releasing_an_impossible_hold_is_404(auditor_client, auditor, world, project):
    hold = artifact_hold_place(store=store_for_project(project=project), ref=world.ref, user=auditor, reason="keep")
    base = f"/projects/{project.slug}/artifacts"
    cases = {
        **{f"hold-{v}": f"{base}/{world.ref}/holds/{v}/release/" for v in (str(2**63), str(2**70), "0")},
        **{
            f"ref-{label}": f"{base}/{quote(ref, safe='')}/holds/{hold.pk}/release/"
            for label, ref in lookalikes(world.ref).items()
        },
    }

    def check(path: str) -> None:
        with writes_nothing():
            response = send(auditor_client, "POST", path, "", FORM)
        assert response.status_code == 404, shown(response)
        assert ArtifactHold.objects.get(pk=hold.pk).released_at is None

    each(cases, check)


def test_an_invalid_retention_form_is_422_naming_the_problem(admin_client, project):
    store_for_project(project=project)
    cases: dict[str, tuple[str, Mentions]] = {
        # Durations and sizes are typed with their units ("7 d", "10 MB"); what is not one is named.
        "nan": ("ttl_ms=NaN", ("“NaN” is not an amount with a unit",)),
        "infinity": ("ttl_ms=Infinity", ("“Infinity” is not an amount with a unit",)),
        "1e400": ("ttl_ms=1e400", ("“e” is not one of d, h, min, s, ms",)),
        "2**70": ("ttl_ms=" + BIG_INT, ("it is too large",)),
        "negative": ("max_ttl_ms=-5", ("greater than 0",)),
        "zero": ("max_bytes_per_scope=0", ("greater than 0",)),
        "fraction": ("max_count_per_scope=1.5", ("Enter a whole number",)),
        "invalid-utf8": ("ttl_ms=%FF", ("utf-8", "not an amount with a unit")),
        "nul": ("ttl_ms=1%002", (NUL,)),
        "10k-digits": ("ttl_ms=" + "9" * 10_000, ("it is too large",)),
        "unknown-unit": ("ttl_ms=7+weeks", ("“weeks” is not one of d, h, min, s, ms",)),
    }

    def check(case: tuple[str, Mentions]) -> None:
        body, mentions = case
        path = f"/projects/{project.slug}/artifacts/retention/"
        with writes_nothing():
            # Undecodable form data is refused before the form (400); a bad value by the form (422).
            form_refused(send(admin_client, "POST", path, body, FORM), (400, 422), mentions)

    each(cases, check)


def test_a_retention_post_without_form_data_is_refused_and_changes_nothing(admin_client, project):
    store_for_project(project=project)
    cases = {
        "empty": (FORM, ""),
        "json": (JSON, dumps({"ttl_ms": None, "max_ttl_ms": None})),
        "text-plain": ("text/plain", "max_ttl_ms="),
    }

    def check(case: tuple[str, bytes | str]) -> None:
        content_type, body = case
        with writes_nothing():
            response = send(admin_client, "POST", f"/projects/{project.slug}/artifacts/retention/", body, content_type)
        assert response.status_code in (400, 415, 422), shown(response)

    each(cases, check)


# --- read endpoints and pages: query parameters --------------------------------------------------


@pytest.fixture
def two_runs(world) -> World:
    for run_id in ("run-a", "run-b"):
        response = world.post("events", dumps({"events": [event(0, run_id), event(1, run_id)]}))
        assert response.status_code == 200, shown(response)
    return world


BAD_CURSORS = {
    "garbage": "!!!",
    "base64-of-text": b64(b"hello"),
    "base64-of-2**70": b64(BIG_INT.encode()),
    "base64-of-invalid-utf8": b64(b"\xff\xfe"),
    "nul": "\x00",
    "10k-chars": "A" * 10_000,
    "k1-2**64": "k1." + b64(f'[{2**64 - 1},"art_{"a" * 22}"]'.encode()),
    "k1-number": "k1." + b64(b"5"),
    "k1-three-items": "k1." + b64(b'[1,"art_aaaaaaaaaaaaaaaaaaaaaa",3]'),
    "k1-5000-deep": "k1." + b64(nested_lists(5000)),
}


def test_a_bad_cursor_restarts_the_listing(two_runs):
    world = two_runs

    def check(cursor: str) -> None:
        with writes_nothing():
            runs = send(world.agent, "GET", f"/api/v1/runs?cursor={quote(cursor)}&limit=1")
            artifacts = send(world.agent, "GET", f"/api/v1/artifacts?cursor={quote(cursor)}", AF_Scope=AF_SCOPE)
        assert (runs.status_code, artifacts.status_code) == (200, 200), f"{shown(runs)}; {shown(artifacts)}"
        assert [r["runId"] for r in runs.json()["runs"]] == ["run-b"]
        assert [a["ref"] for a in artifacts.json()["artifacts"]] == [world.ref]

    each(BAD_CURSORS, check)


PAGING = {
    "runs-limit": ("/api/v1/runs?limit=", "limit"),
    "events-after-seq": ("/api/v1/runs/run-a/events?after_seq=", "after_seq"),
    "events-limit": ("/api/v1/runs/run-a/events?limit=", "limit"),
    "artifacts-limit": ("/api/v1/artifacts?limit=", "limit"),
    "decision-wait": ("/api/v1/asks/{ask}/decision?wait=", "wait"),
}


def test_a_non_integer_paging_parameter_is_422_naming_it(two_runs):
    world = two_runs
    values = {"words": "abc", "1e400": "1e400", "nan": "NaN", "infinity": "Infinity", "empty": "", "nul": "%00"}
    cases = {
        f"{where}-{label}": (path.replace("{ask}", str(world.ask_id)) + value, param)
        for where, (path, param) in PAGING.items()
        for label, value in values.items()
        if not (param == "wait" and label in ("1e400", "infinity"))  # a float: those are numbers
    } | {
        f"{where}-fraction": (path + "1.5", param)
        for where, (path, param) in PAGING.items()
        # a float wait is a number; an artifact list's limit is rounded down (artifacts spec §1.5)
        if param != "wait" and where != "artifacts-limit"
    }

    def check(case: tuple[str, str]) -> None:
        path, param = case
        with writes_nothing():
            refused(send(world.agent, "GET", path, AF_Scope=AF_SCOPE), 422, "ERR_INVALID_PARAMETERS", (param,))

    each(cases, check)


def test_an_out_of_range_paging_integer_is_clamped_or_matches_nothing(two_runs):
    world = two_runs
    cases = {
        f"{where}-{label}": path.replace("{ask}", str(world.ask_id)) + value
        for where, (path, param) in PAGING.items()
        for label, value in (("2**70", BIG_INT), ("-2**70", "-" + BIG_INT), ("2**63", str(2**63)), ("-1", "-1"))
        if param != "wait" or value.startswith("-")  # a long wait is clamped to 55 s: it would hold the test
    }

    def check(path: str) -> None:
        with writes_nothing():
            response = send(world.agent, "GET", path, AF_Scope=AF_SCOPE)
        assert response.status_code == 200, shown(response)

    each(cases, check)


def test_a_run_filter_postgresql_cannot_hold_is_422_naming_it(two_runs):
    world = two_runs
    cases = {
        f"{param}-{label}": (param, value)
        for param in ("q", "session", "agent", "tool", "status", "since")
        for label, value in (("nul", "%00"), ("embedded-nul", "a%00b"))
    }

    def check(case: tuple[str, str]) -> None:
        param, value = case
        with writes_nothing():
            refused(send(world.agent, "GET", f"/api/v1/runs?{param}={value}"), 422, None, (param,))

    each(cases, check)


def test_a_long_run_search_is_just_a_search(two_runs):
    def check(param: str) -> None:
        response = send(two_runs.agent, "GET", f"/api/v1/runs?{param}={quote(random_text(100_000))}")
        assert response.status_code == 200, shown(response)
        assert response.json()["runs"] == []

    each({p: p for p in ("session", "agent", "tool")}, check)


def test_a_search_over_its_length_limit_is_422_naming_it(two_runs):
    """Each word of a search is one indexed lookup: a search is at most 200 characters, as on the run list."""
    with writes_nothing():
        refused(send(two_runs.agent, "GET", f"/api/v1/runs?q={quote(random_text(100_000))}"), 422, None, ("q",))
    assert send(two_runs.agent, "GET", f"/api/v1/runs?q={'a' * 200}").status_code == 200


def test_reading_a_run_by_a_malformed_id_is_404(world):
    cases = {
        "nul": "a%00b",
        "only-nul": "%00",
        "10k": quote(random_text(10_000)),
        "cyrillic": quote("run-\u0430"),
    }

    def check(run_id: str) -> None:
        with writes_nothing():
            for suffix in ("", "/events", "/verify", "/audit-bundle"):
                refused(send(world.agent, "GET", f"/api/v1/runs/{run_id}{suffix}"), 404, "ERR_RUN_NOT_FOUND")

    each(cases, check)


def test_pages_drop_bad_query_values(auditor_client, approver_client, two_runs, project):
    """Human pages follow RunFilterForm's rule: a value that does not parse is dropped, not a 400."""
    b64_big = quote(b64(BIG_INT.encode()))
    runs = f"/projects/{project.slug}/runs/run-a/events/?after_seq="
    artifacts = f"/projects/{project.slug}/artifacts/?"
    cases = {
        **{
            f"run-list-{q}": (auditor_client, f"/runs/?{q}")
            for q in (
                "cursor=!!!",
                f"cursor={b64_big}",
                "cursor=%00",
                "q=%00",
                "session=a%00b",
                "since=not-a-date",
                f"until={BIG_INT}",
                "status=%FF",
                "project=%00",
            )
        },
        **{f"run-events-{v}": (auditor_client, runs + v) for v in ("abc", BIG_INT, "-" + BIG_INT, "%00", "1e400")},
        **{f"inbox-{q}": (approver_client, f"/inbox/?{q}") for q in ("cursor=!!!", f"cursor={b64_big}", "cursor=%00")},
        **{
            f"artifacts-{q[:20]}": (auditor_client, artifacts + q)
            for q in (
                "cursor=!!!",
                f"cursor={b64_big}",
                "kind=a%00b",
                "conversation=%00",
                "run=%00",
                "state=%00",
                "kind=" + quote(random_text(100_000)),
            )
        },
        **{
            f"refusals-{q}": (auditor_client, f"/refusals/?{q}")
            for q in (
                "cursor=!!!",
                f"cursor={b64_big}",
                "category=%00",
                "rule=a%00b",
                "tool=%00",
                "agent=%00",
                f"since={BIG_INT}",
            )
        },
    }

    def check(case: tuple[Client, str]) -> None:
        client, path = case
        with writes_nothing():
            response = send(client, "GET", path)
        assert response.status_code == 200, shown(response)

    each(cases, check)


def test_pages_for_a_malformed_id_or_ref_are_404(auditor_client, world, project):
    base = f"/projects/{project.slug}"
    cases = {
        **{
            f"run-{label}-{suffix or 'detail'}": f"{base}/runs/{run_id}/{suffix}"
            for label, run_id in (("nul", "a%00b"), ("cyrillic", quote("run-\u0430")), ("10k", "r" * 10_000))
            for suffix in ("", "events/", "integrity/")
        },
        **{
            f"artifact-{label}-{suffix or 'detail'}": f"{base}/artifacts/{quote(ref, safe='')}/{suffix}"
            for label, ref in lookalikes(world.ref).items()
            for suffix in ("", "download/")
        },
    }

    def check(path: str) -> None:
        with writes_nothing():
            response = send(auditor_client, "GET", path)
        assert response.status_code == 404, shown(response)

    each(cases, check)
