"""Fuzzing (#7): schemathesis drives every operation of the served OpenAPI document, in-process over
WSGI, once with a key that carries every scope and once with no key at all.

Every answer must be below 500 and be what the document declares for its operation: a declared
status, the declared content type, a body that matches the declared schema. Generation is
deterministic and keeps no example database; FUZZ_EXAMPLES sets the examples per operation
(`make soak` raises it).
"""

import copy
import os
import tempfile
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis import Case, checks
from schemathesis.config import SchemathesisConfig
from schemathesis.schemas import BaseSchema

from artifacts.scopes import scope_header
from footprint_site.wsgi import application
from ledger.asks import waits
from tenancy.models import AGENT_SCOPES, AgentKey
from tenancy.services import agent_key_create, project_get_or_create
from tests.conftest import DATA, ApiClient, fixture_events, load_fixture

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
# Hypothesis's pytest plugin caches constants (and Unicode tables) under ./.hypothesis while it
# collects, before any fixture runs: point it outside the repository when this module is imported.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "footprint-ledger-hypothesis")
OPENAPI = "/api/v1/openapi.json"
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]
# Values at the edges of what Python, PostgreSQL and the wire formats hold, mixed into generated
# strings, integers and numbers: schemathesis alone rarely draws them.
EDGES = {
    "edge-strings": [
        "a/b",
        "9999-12-31T23:59:59-23:59",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00+01:00",
        "\u00e9\u2603\U0001f600",
    ],
    "edge-integers": [-1, 0, 2**31 - 1, 2**31, 2**53, 2**63],
    "edge-numbers": [-1, 253_402_300_800_000, 1e300],
}
CONFIG = {
    "seed": 7,
    "dictionaries": {name: {"values": values} for name, values in EDGES.items()},
    "generation": {
        "mode": "all",
        "max-examples": FUZZ_EXAMPLES,
        "deterministic": True,
        "database": "none",
        "dictionaries": {
            kind: {"dictionary": f"edge-{kind}s", "probability": 0.2} for kind in ("string", "integer", "number")
        },
    },
}
KEYLESS_REFUSALS = {HTTPStatus.UNAUTHORIZED, HTTPStatus.BAD_REQUEST, HTTPStatus.UNPROCESSABLE_ENTITY}
SCOPE = {"tenant": "fuzz-tenant", "conversationId": "fuzz-conversation"}
B_PAUSE = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]["pauseData"]


@dataclass
class Seed:
    """What fuzzed requests can hit: a key with every scope, and real run ids, ask ids and refs."""

    secret: str
    run_ids: list[str]
    ask_ids: list[int]
    refs: list[str]


def _ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.content
    return response.json()


@pytest.fixture
def seed(transactional_db: None) -> Seed:
    """One project holding runs, an open and a decided ask, an audit bundle and two artifacts.

    The WSGI handler commits and closes connections as a server does: hence a transactional db."""
    project = project_get_or_create(slug="fuzz")
    secret = agent_key_create(project=project, scopes=list(AgentKey.Scope.values))[1]
    client = ApiClient(secret)
    run_ids = []
    for name in ("a-run-recording/events.json", "e-tool-effects/events.json"):
        run_ids += [receipt["runId"] for receipt in _ok(client.ingest(fixture_events(name)))["runs"]]
    ask_ids = []
    # Another key opens the asks: the key that opens an ask may not decide it.
    agent = ApiClient(agent_key_create(project=project, scopes=AGENT_SCOPES)[1])
    for tool_call_id in ("t3", "t4"):
        body = {"runId": run_ids[0], "pauseData": {**copy.deepcopy(B_PAUSE), "toolCallId": tool_call_id}}
        ask_ids.append(_ok(agent.post_json("/api/v1/asks", {**body, "checkpoint": {"step": 3}}), 201)["ask"]["id"])
    _ok(client.post_json(f"/api/v1/asks/{ask_ids[1]}/decision", {"approved": True, "by": "fuzz"}))
    bundle = (DATA / "f-audit/bundle.json").read_bytes()
    _ok(client.post("/api/v1/audit-bundles", bundle, content_type="application/json"), 201)
    refs = []
    for shape, value in (("text", "hello"), ("json", '{"a":1}')):
        document = {"kind": "fuzz/seed", "mediaType": "text/plain", "payload": {"shape": shape, "value": value}}
        response = client.post(
            "/api/v1/artifacts", document, content_type="application/json", headers={"AF-Scope": scope_header(SCOPE)}
        )
        refs.append(_ok(response, 201)["meta"]["ref"])
    return Seed(secret=secret, run_ids=run_ids, ask_ids=ask_ids, refs=refs)


def _sometimes(generated: dict[str, Any] | None, real: dict[str, list[Any]]) -> st.SearchStrategy[Any]:
    """The generated values, or the same with the keys in `real` replaced by ones that exist."""
    present = {key: st.sampled_from(values) for key, values in real.items() if key in (generated or {}) and values}
    if not present:
        return st.just(generated)
    return st.one_of(st.just(generated), st.fixed_dictionaries(present).map(lambda r: {**(generated or {}), **r}))


def _served_schema(seed: Seed, config: dict[str, Any]) -> BaseSchema:
    """The OpenAPI document the server serves, loaded over WSGI like any other request. Half the
    time a run id, ask id, artifact ref or scope is a seeded one, so requests get past lookups."""
    schema = schemathesis.openapi.from_wsgi(OPENAPI, application, config=SchemathesisConfig.from_dict(config))
    # Fixed lists, never re-read from the database: Hypothesis replays draws and needs the same choices.
    existing = {"run_id": seed.run_ids, "ask_id": seed.ask_ids, "ref": seed.refs}
    scoped = {"AF-Scope": [scope_header(SCOPE)]}
    schema.hook("flatmap_path_parameters")(lambda context, parameters: _sometimes(parameters, existing))
    schema.hook("flatmap_headers")(lambda context, headers: _sometimes(headers, scoped))
    return schema


@pytest.fixture
def keyed_schema(seed: Seed) -> BaseSchema:
    return _served_schema(seed, CONFIG)


@pytest.fixture
def keyless_schema(seed: Seed) -> BaseSchema:
    """Without a key every request is refused before its parameters are read: the coverage phase's
    boundary values would test nothing more than the fuzzing phase does."""
    return _served_schema(seed, {**CONFIG, "phases": {"coverage": {"enabled": False}}})


@pytest.fixture(autouse=True)
def _short_ask_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fuzzed `wait` on a real open ask would hold its request for up to 55 s."""
    monkeypatch.setattr(waits, "ASK_WAIT_MAX_SECONDS", 0.05)


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy loader reads and writes `Function._nodeid`, gone in pytest 9.2."""
    request.node._nodeid = request.node.nodeid


# One test per key: every operation runs as a subtest against one seeded database (a transactional
# db is flushed after each test, which is what costs time). The test-only hooks are left out: they
# are mounted only under FOOTPRINT_TEST_HOOKS, never on a served server.
keyed = schemathesis.pytest.from_fixture("keyed_schema").exclude(tag="testing")
keyless = schemathesis.pytest.from_fixture("keyless_schema").exclude(tag="testing")
# The examples of an operation share the seeded database and see what earlier examples wrote.
SHARED_FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@keyed.parametrize()
@SHARED_FIXTURES
def test_every_operation_with_an_all_scopes_key_answers_as_declared(case: Case, seed: Seed) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {seed.secret}"}, checks=CHECKS)


@keyless.parametrize()
@SHARED_FIXTURES
def test_every_operation_without_a_key_is_refused_as_declared(case: Case) -> None:
    """401, or the 400/422 that refuses a malformed request (U+0000 in the query) before anything
    is read: never an answer that depends on the project's data."""
    if case.headers:
        case.headers.pop("Authorization", None)
    response = case.call_and_validate(checks=CHECKS)
    assert response.status_code in KEYLESS_REFUSALS, response.text
