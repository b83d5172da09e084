"""Refusal sentences, word for word against the framework's own capture (scenario d, 9.62.0).

The store is rebuilt through the ORM with the fixture's refs, kinds, media types, labels, bytes,
digests, origins, parents and createdAt values (tests/data/d-artifacts/store-dump.json), under the
fixture's scope; then the same calls are made over HTTP with the same tool names and arguments (read
from tests/data/d-artifacts/events.json) and the sentences are compared with what the model read
back (refusals.json → toolResultsAsTheModelReadThem) and with the `refused` events' details.

The only permitted difference is the live-refs clause: the server writes the seed's past-tense
wording (spec §6.3), while 9.62.0 wrote the present tense. `seed_wording()` rewrites exactly that
clause in the expected text, mechanically, and everything else must be equal.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from artifacts.models import Artifact
from artifacts.services import store_for_project
from tests.artifacts.conftest import REF_RE, StoreClient, js_json, orm_put, orm_put_many, sha256_digest

pytestmark = pytest.mark.django_db

DATA = Path(__file__).resolve().parent.parent / "data" / "d-artifacts"
REFUSALS = json.loads((DATA / "refusals.json").read_text())
DUMP = json.loads((DATA / "store-dump.json").read_text())
EVENTS = json.loads((DATA / "events.json").read_text())["events"]

SCOPE = {"tenant": "acme-corp", "principal": "analyst-42", "conversationId": "conv-d-q3-sales"}
RENDER_CHART_WANTS = {"dataset": "dataset/rows"}
TOOL_RESULTS = {r["toolCallId"]: r for r in REFUSALS["toolResultsAsTheModelReadThem"]}
TOOL_ARGS = {
    e["payload"]["toolCallId"]: e["payload"]["args"] for e in EVENTS if e["type"] == "agentfootprint.stream.tool_start"
}
ROWS = {row["ref"]: row for row in DUMP["sqlite"]["af_artifacts"]}
DATASET, NOTE, CHART, PREVIEW = (
    "art_cDRCFlfMn1JOBXFGxyuOjM",
    "art_RlFNRYQlD2bUMEnuKktfQo",
    "art_Vd0In7huBFwiKtdbsiiJ0x",
    "art_rCSV3UFSrtnQPIf4Zsmi9s",
)
UNKNOWN = "art_0000000000000000000000"

# The dump holds the dataset AFTER the run edited it behind the store's back ("one JSON value
# changed", fixture README): order 1000's region reads "XX". The chart minted from the untouched
# rows says NA = 88 = 1 + 15 + 29 + 43, so order 1000 was "NA"; the minted digest proves it below.
TAMPERED_DATASET = ROWS[DATASET]["payload"].encode()
ORIGINAL_DATASET = TAMPERED_DATASET.replace(b'"region":"XX"', b'"region":"NA"', 1)

# --- the one permitted difference: 9.62.0's present-tense live-refs clause → the seed's -----------
SEED_LISTING = "These '{kind}' refs were live in this run's scope when that call was refused: "
SEED_NONE = "No live '{kind}' artifacts were in this run's scope when that call was refused — "
OLD_LISTING = re.compile(r"Live '([^']+)' refs in scope: ")
OLD_NONE = re.compile(r"No live '([^']+)' artifacts exist in this run's scope right now — ")


def seed_wording(text: str) -> tuple[str, int]:
    """Rewrite the 9.62.0 live-refs clause to the seed's wording; returns (text, clauses rewritten)."""
    text, listed = OLD_LISTING.subn(lambda m: SEED_LISTING.format(kind=m.group(1)), text)
    text, none = OLD_NONE.subn(lambda m: SEED_NONE.format(kind=m.group(1)), text)
    return text, listed + none


def live_clause(kind: str, metas: list[dict[str, Any]]) -> str:
    """The seed's clause (artifacts-wants.js `liveRefsClause`), for sentences built in these tests."""
    if not metas:
        return (
            f"No live '{kind}' artifacts were in this run's scope when that call was refused — "
            f"produce one first (a tool that stores '{kind}', or re-run the step that minted it)."
        )
    items = ", ".join(
        f"{m['ref']} ('{m['label']}', {m['bytes']} bytes)"
        if m.get("label") is not None
        else f"{m['ref']} ({m['bytes']} bytes)"
        for m in metas
    )
    return f"These '{kind}' refs were live in this run's scope when that call was refused: {items}. Pass one of these."


# --- the fixture's store, rebuilt ---------------------------------------------------------------
def seed_artifact(store_model: Any, ref: str, *, body: bytes | None = None) -> Artifact:
    row = ROWS[ref]
    body = body if body is not None else row["payload"].encode()
    assert len(body) == row["bytes"], ref
    if body != TAMPERED_DATASET:
        assert row["digest"] is None or sha256_digest(body) == row["digest"], ref
    return orm_put(
        store_model,
        SCOPE,
        ref=ref,
        kind=row["kind"],
        media_type=row["media_type"],
        shape=row["payload_shape"],
        body=body,
        label=row["label"],
        digest=row["digest"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        origin=json.loads(row["origin"]) if row["origin"] else None,
        parent_refs=json.loads(row["parent_refs"]) if row["parent_refs"] else None,
    )


def tamper(artifact: Artifact, body: bytes) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE artifacts_payload SET body = %s WHERE expiry_bucket = %s AND artifact_id = %s",
            [body, artifact.expiry_bucket, artifact.pk],
        )


@pytest.fixture
def d_store(harness: Any) -> StoreClient:
    """The store as it stood when render_chart was refused (d5 to d8): dataset, note, chart."""
    store = harness.create_store()
    model = store_for_project(project=store.project)
    store.seeded = {  # type: ignore[attr-defined]
        DATASET: seed_artifact(model, DATASET, body=ORIGINAL_DATASET),
        NOTE: seed_artifact(model, NOTE),
        CHART: seed_artifact(model, CHART),
    }
    return store


def fixture_refusal(tool_call_id: str) -> str:
    return TOOL_RESULTS[tool_call_id]["content"]


def resolve_render_chart(store: StoreClient, tool_call_id: str) -> dict[str, Any]:
    assert TOOL_RESULTS[tool_call_id]["toolName"] == "render_chart"
    return store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, TOOL_ARGS[tool_call_id])


# --- the fixture itself -------------------------------------------------------------------------
def test_fixture_scope_and_reconstructed_dataset_are_the_minted_ones():
    assert DUMP["scope"] == SCOPE
    assert sha256_digest(ORIGINAL_DATASET) == ROWS[DATASET]["digest"]
    assert sha256_digest(TAMPERED_DATASET) == DUMP["payloadsViaGet"][3]["error"]["actual"]
    assert len(ORIGINAL_DATASET) == ROWS[DATASET]["bytes"] == 499


def test_seed_wording_rewrites_only_the_live_refs_clause():
    old = "x. Live 'dataset/rows' refs in scope: art_a ('L', 1 bytes). Pass one of these."
    assert seed_wording(old) == (
        "x. These 'dataset/rows' refs were live in this run's scope when that call was refused: "
        "art_a ('L', 1 bytes). Pass one of these.",
        1,
    )
    old_none = (
        "x. No live 'k' artifacts exist in this run's scope right now — produce one first (a tool that stores "
        "'k', or re-run the step that minted it)."
    )
    assert seed_wording(old_none) == (f"x. {live_clause('k', [])}", 1)
    assert seed_wording("no clause here") == ("no clause here", 0)


# --- render_chart refused at dispatch (d5 to d8) ------------------------------------------------------
@pytest.mark.parametrize(
    ("tool_call_id", "reason", "clauses"),
    [
        ("d5", "invalid-input", 1),
        ("d6", "missing-or-expired", 1),
        ("d7", "kind-mismatch", 1),
        ("d8", "digest-mismatch", 0),
    ],
)
def test_resolve_refusal_matches_fixture_word_for_word(d_store, tool_call_id, reason, clauses):
    if tool_call_id == "d8":
        tamper(d_store.seeded[DATASET], TAMPERED_DATASET)
    expected, rewritten = seed_wording(fixture_refusal(tool_call_id))
    assert rewritten == clauses  # the clause the seed rewrote is present exactly where expected

    result = resolve_render_chart(d_store, tool_call_id)

    assert result["ok"] is False
    assert [r["reason"] for r in result["refusals"]] == [reason]
    assert result["refusal"] == expected


@pytest.mark.parametrize(
    "event",
    [
        e
        for e in REFUSALS["refusedEvents"]
        if e["payload"]["op"] == "dispatch" and e["payload"]["tool"] == "render_chart"
    ],
    ids=lambda e: f"seq{e['seq']}-{e['payload']['reason']}",
)
def test_resolve_refusal_details_match_refused_events(d_store, event):
    payload = event["payload"]
    if payload["reason"] == "digest-mismatch":
        tamper(d_store.seeded[DATASET], TAMPERED_DATASET)
    call = next(e["payload"] for e in EVENTS if e["seq"] == event["seq"] - 1 and e["type"].endswith("tool_start"))

    result = d_store.resolve(SCOPE, call["toolName"], RENDER_CHART_WANTS, call["args"])

    (refusal,) = result["refusals"]
    assert refusal["argName"] == "dataset"
    assert refusal["kind"] == "dataset/rows"
    assert refusal["reason"] == payload["reason"]
    assert refusal.get("ref") == payload.get("ref")
    assert refusal["detail"] == seed_wording(payload["detail"])[0]


def test_resolve_success_delivers_data_metas_and_resolved_list(d_store):
    """d3: the dataset resolves; the tool would receive the rows, and ctx.wanted the meta."""
    result = d_store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {**TOOL_ARGS["d3"], "title": "Q3"})
    dataset_meta = next(m for m in DUMP["listViaPort"] if m["ref"] == DATASET)

    assert result["ok"] is True
    assert result["args"] == {"dataset": json.loads(ORIGINAL_DATASET), "title": "Q3"}
    assert result["wanted"] == {"dataset": dataset_meta}
    assert result["resolved"] == [{"argName": "dataset", "meta": dataset_meta}]
    assert "refusal" not in result
    assert "refusals" not in result


def test_resolve_success_delivers_text_as_the_string(d_store):
    result = d_store.resolve(SCOPE, "summarize", {"note": "note/text"}, {"note": NOTE})
    assert result["ok"] is True
    assert result["args"] == {"note": ROWS[NOTE]["payload"]}


def test_resolve_optional_absent_argument_is_skipped(d_store):
    schema = {"type": "object", "properties": {"dataset": {"type": "string"}, "title": {"type": "string"}}}
    result = d_store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"title": "t"}, schema)
    assert result == {"ok": True, "args": {"title": "t"}, "wanted": {}, "resolved": []}


# --- probe_store (d9): the port's own refusals --------------------------------------------------
PROBE = TOOL_RESULTS["d9"]["content"].split("\n")
ERROR_CLASS = {
    "ERR_UNKNOWN_PARENT_REF": "UnknownParentRefError",
    "ERR_INVALID_ARTIFACT": "InvalidArtifactError",
    "ERR_ARTIFACT_INTEGRITY": "ArtifactIntegrityError",
}


def _probe_line(label: str) -> str:
    line = next(line for line in PROBE if line.startswith(f"{label}: "))
    return line[len(label) + 2 :]


def _as_read(response: Any) -> str:
    """A port answer written the way probe_store wrote it for the model."""
    body = response.json()
    return f"{ERROR_CLASS[body['code']]}: {body['error']}"


def test_probe_get_and_head_of_unknown_ref_are_null(d_store):
    assert _probe_line("get(unknown)") == "null"
    assert _probe_line("head(unknown)") == "null"
    assert d_store.get(SCOPE, UNKNOWN) is None
    assert d_store.head(SCOPE, UNKNOWN) is None


def test_probe_put_dangling_parent_refusal_matches_fixture(d_store):
    response = d_store.put_raw(
        SCOPE,
        {
            "kind": "probe/child",
            "mediaType": "text/plain",
            "payload": {"shape": "text", "value": "orphan"},
            "parentRefs": [UNKNOWN],
        },
    )
    assert response.status_code == 422
    assert response.json()["code"] == "ERR_UNKNOWN_PARENT_REF"
    assert response.json()["unresolved"] == [UNKNOWN]
    assert _as_read(response) == _probe_line("put(dangling parent)")
    event = next(e for e in REFUSALS["refusedEvents"] if e["payload"]["reason"] == "unknown-parent")
    assert response.json()["error"] == event["payload"]["detail"]


def test_probe_put_blank_kind_refusal_matches_fixture(d_store):
    response = d_store.put_raw(
        SCOPE, {"kind": "  ", "mediaType": "text/plain", "payload": {"shape": "text", "value": "x"}}
    )
    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_ARTIFACT"
    assert _as_read(response) == _probe_line("put(blank kind)")
    event = next(
        e
        for e in REFUSALS["refusedEvents"]
        if e["payload"]["op"] == "put" and e["payload"]["reason"] == "invalid-input"
    )
    assert response.json()["error"] == event["payload"]["detail"]


def test_probe_head_of_corrupted_dataset_still_reads(d_store):
    tamper(d_store.seeded[DATASET], TAMPERED_DATASET)
    assert _probe_line("head(dataset)") == f'ok "{DATASET}"'
    meta = d_store.head(SCOPE, DATASET)
    assert meta is not None
    assert meta["ref"] == DATASET
    assert meta["digest"] == ROWS[DATASET]["digest"]


def test_probe_get_of_corrupted_dataset_refusal_matches_fixture(d_store):
    tamper(d_store.seeded[DATASET], TAMPERED_DATASET)
    expected = DUMP["payloadsViaGet"][3]["error"]

    response = d_store.get_raw(SCOPE, DATASET)

    assert response.status_code == 500
    body = response.json()
    assert body["code"] == expected["code"] == "ERR_ARTIFACT_INTEGRITY"
    assert body["error"] == expected["message"]
    assert body["expected"] == expected["expected"]
    assert body["actual"] == expected["actual"]
    assert body["ref"] == DATASET
    assert _as_read(response) == _probe_line("get(dataset)")


def test_probe_store_whole_tool_result_matches_fixture(d_store):
    """The full text probe_store returned to the model, rebuilt from the server's answers."""
    tamper(d_store.seeded[DATASET], TAMPERED_DATASET)
    lines = [
        f"get(unknown): {'null' if d_store.get(SCOPE, UNKNOWN) is None else 'found'}",
        f"head(unknown): {'null' if d_store.head(SCOPE, UNKNOWN) is None else 'found'}",
        "put(dangling parent): "
        + _as_read(
            d_store.put_raw(
                SCOPE,
                {
                    "kind": "probe/child",
                    "mediaType": "text/plain",
                    "payload": {"shape": "text", "value": "o"},
                    "parentRefs": [UNKNOWN],
                },
            )
        ),
        "put(blank kind): "
        + _as_read(
            d_store.put_raw(
                SCOPE, {"kind": "  ", "mediaType": "text/plain", "payload": {"shape": "text", "value": "x"}}
            )
        ),
        f'head(dataset): ok "{(d_store.head(SCOPE, DATASET) or {}).get("ref")}"',
        "get(dataset): " + _as_read(d_store.get_raw(SCOPE, DATASET)),
    ]
    assert "\n".join(lines) == TOOL_RESULTS["d9"]["content"]


# --- the store after the run (store-dump.json) ---------------------------------------------------
def test_store_dump_list_and_payloads_match_fixture(harness):
    store = harness.create_store()
    model = store_for_project(project=store.project)
    for ref in ROWS:
        seed_artifact(model, ref)  # the dump's bytes: the dataset is the edited one

    assert store.list(SCOPE) == {"artifacts": DUMP["listViaPort"]}
    for expected in DUMP["payloadsViaGet"]:
        if expected["ok"]:
            record = store.get(SCOPE, expected["ref"])
            assert record is not None, expected["ref"]
            assert record.data == expected["data"], expected["ref"]
        else:
            response = store.get_raw(SCOPE, expected["ref"])
            assert response.status_code == 500
            body = response.json()
            assert (body["code"], body["error"], body["expected"], body["actual"]) == (
                expected["error"]["code"],
                expected["error"]["message"],
                expected["error"]["expected"],
                expected["error"]["actual"],
            )
    foreign = {**SCOPE, "principal": "analyst-43"}
    assert store.list(foreign) == DUMP["listUnderForeignPrincipal"]


# --- shapes of the combined refusal -------------------------------------------------------------
def test_resolve_multiple_failing_arguments_are_plural_and_joined_by_one_space(d_store):
    wants = {"dataset": "dataset/rows", "note": "note/text", "chart": "chart/spec"}
    args = {"dataset": UNKNOWN, "note": 42, "chart": CHART}
    dataset_live = [m for m in DUMP["listViaPort"] if m["ref"] == DATASET]
    note_live = [m for m in DUMP["listViaPort"] if m["ref"] == NOTE]

    result = d_store.resolve(SCOPE, "compose", wants, args)

    details = [
        f"'dataset' = {UNKNOWN} does not resolve in this run's scope — expired, swept, or never stored here. "
        + live_clause("dataset/rows", dataset_live),
        "'note' must be an artifact ref STRING (an art_… ticket), not a number — this tool declares it wants "
        "'note/text' there and the framework resolves the ref for you; never inline the data. "
        + live_clause("note/text", note_live),
    ]
    assert result["ok"] is False
    assert [r["argName"] for r in result["refusals"]] == ["dataset", "note"]
    assert [r["detail"] for r in result["refusals"]] == details
    assert result["refusal"] == (
        "Tool 'compose' was not executed — its declared artifact arguments did not resolve. " + " ".join(details)
    )
    assert "ref" not in result["refusals"][1]  # no string ref was spoken
    assert result["refusals"][0]["ref"] == UNKNOWN


def test_resolve_required_argument_missing_is_refused_by_name(d_store):
    schema = {"type": "object", "properties": {"dataset": {"type": "string"}}, "required": ["dataset"]}
    dataset_live = [m for m in DUMP["listViaPort"] if m["ref"] == DATASET]

    result = d_store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {}, schema)

    detail = (
        "'dataset' is required and no value was passed — this tool declares it wants a 'dataset/rows' artifact "
        "there, and the framework resolves the ref BEFORE the tool runs, so the tool is never executed without "
        "it. Pass the art_… ref as 'dataset'. " + live_clause("dataset/rows", dataset_live)
    )
    assert result["refusals"] == [
        {"argName": "dataset", "kind": "dataset/rows", "reason": "invalid-input", "detail": detail}
    ]
    assert (
        result["refusal"]
        == f"Tool 'render_chart' was not executed — its declared artifact argument did not resolve. {detail}"
    )


@pytest.mark.parametrize(
    ("spoken", "said"),
    [
        (None, "null"),
        ([DATASET], "an array"),
        (7, "a number"),
        (1.5, "a number"),
        ({"ref": DATASET}, "a object"),
        (True, "a boolean"),
        ("", "an empty string"),
        ("   ", "an empty string"),
        ("\t\n", "an empty string"),
    ],
    ids=["null", "array", "int", "float", "object", "boolean", "empty", "spaces", "tab-newline"],
)
def test_resolve_spoken_value_is_named_the_way_the_framework_names_it(d_store, spoken, said):
    dataset_live = [m for m in DUMP["listViaPort"] if m["ref"] == DATASET]
    result = d_store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": spoken})
    detail = (
        f"'dataset' must be an artifact ref STRING (an art_… ticket), not {said} — this tool declares it wants "
        "'dataset/rows' there and the framework resolves the ref for you; never inline the data. "
        + live_clause("dataset/rows", dataset_live)
    )
    assert result["refusals"] == [
        {"argName": "dataset", "kind": "dataset/rows", "reason": "invalid-input", "detail": detail}
    ]


@pytest.mark.parametrize(
    ("spoken", "blank_in_js"),
    [("\ufeff", True), ("\u00a0\u2028\u3000", True), ("\x1f", False), ("\x85", False)],
    ids=["bom", "nbsp-ls-ideographic", "unit-separator", "next-line"],
)
def test_resolve_blank_spoken_ref_follows_javascript_trim(d_store, spoken, blank_in_js):
    """The seed refuses `spoken.trim().length === 0` as 'an empty string'; anything else is looked
    up and, here, does not resolve. JS trim and Python strip disagree on U+FEFF, U+001C to U+001F, U+0085."""
    result = d_store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": spoken})
    assert result["refusals"][0]["reason"] == ("invalid-input" if blank_in_js else "missing-or-expired")


def test_resolve_with_nothing_live_says_so_in_the_past_tense(harness):
    store = harness.create_store()
    result = store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": UNKNOWN})
    assert result["refusal"] == (
        "Tool 'render_chart' was not executed — its declared artifact argument did not resolve. "
        f"'dataset' = {UNKNOWN} does not resolve in this run's scope — expired, swept, or never stored here. "
        "No live 'dataset/rows' artifacts were in this run's scope when that call was refused — produce one first "
        "(a tool that stores 'dataset/rows', or re-run the step that minted it)."
    )


def test_resolve_unlabelled_live_ref_is_listed_with_bytes_only(harness):
    store = harness.create_store()
    meta, _ = store.put(SCOPE, kind="scratch/preview", media_type="text/plain", data="second preview")
    result = store.resolve(SCOPE, "show", {"preview": "scratch/preview"}, {"preview": UNKNOWN})
    assert result["refusals"][0]["detail"].endswith(
        f"These 'scratch/preview' refs were live in this run's scope when that call was refused: "
        f"{meta['ref']} (14 bytes). Pass one of these."
    )


# --- wants declarations refused at definition time (assertToolWants) ----------------------------
DEFINE = "defineTool: tool 'render_chart' declares "


@pytest.mark.parametrize(
    ("wants", "schema", "sentence"),
    [
        pytest.param(
            {},
            None,
            DEFINE + "wants: {} — an empty declaration resolves nothing and reads as one that does. Name at least one "
            "argument (e.g. wants: { dataset: 'dataset/rows' }), or omit `wants` — absent means no argument is "
            "resolved, exactly as before.",
            id="empty",
        ),
        *[
            pytest.param(
                {"dataset": kind},
                None,
                DEFINE
                + f"wants.dataset = {shown}, which is not an artifact kind. The value is the consumer vocabulary "
                "the resolved artifact's meta.kind must equal exactly (e.g. 'dataset/rows').",
                id=f"kind-{name}",
            )
            for name, kind, shown in [
                ("empty", "", '""'),
                ("blank", "   ", '"   "'),
                ("number", 7, "7"),
                ("array", ["dataset/rows"], '["dataset/rows"]'),
                ("null", None, "null"),  # JSON.stringify(null) — the wire has no `undefined`
                ("large-number", 1e20, "100000000000000000000"),  # as JavaScript prints it, not 1e+20
            ]
        ],
        pytest.param(
            {"dataset": "dataset/rows"},
            {"type": "object", "properties": {"rows": {"type": "string"}}},
            DEFINE + "wants.dataset, but inputSchema.properties has no 'dataset' — the model is never offered that "
            "argument, so no ref could ever arrive to resolve. Add it to inputSchema (type: 'string' — the model "
            "passes the art_… ref), or drop it from `wants`.",
            id="arg-not-in-properties",
        ),
        pytest.param(  # typeof [] === 'object' in the seed, and 'dataset' in [] is false
            {"dataset": "dataset/rows"},
            {"type": "object", "properties": []},
            DEFINE + "wants.dataset, but inputSchema.properties has no 'dataset' — the model is never offered that "
            "argument, so no ref could ever arrive to resolve. Add it to inputSchema (type: 'string' — the model "
            "passes the art_… ref), or drop it from `wants`.",
            id="arg-not-in-array-properties",
        ),
        *[
            pytest.param(
                {"dataset": "dataset/rows"},
                {"type": "object", "properties": {"dataset": {"type": declared}}},
                DEFINE + f"wants.dataset, but inputSchema declares that argument as type '{shown}'. A wants-argument "
                "is spoken as the ref STRING (the model routes the ticket, never the bytes) — declare it "
                "{ type: 'string' }.",
                id=f"type-{name}",
            )
            for name, declared, shown in [
                ("object", "object", "object"),
                ("array", "array", "array"),
                ("union", ["string", "null"], "string,null"),
                ("number-literal", 5, "5"),
                ("null", None, "null"),  # `type: null` !== undefined in the seed, so it is refused
                ("tiny-number", 1e-7, "1e-7"),  # String(1e-7), not Python's 1e-07
                ("rounded-number", 123456789012345680000, "123456789012345680000"),  # the double's shortest digits
            ]
        ],
    ],
)
def test_resolve_invalid_wants_declaration_is_refused_with_the_define_tool_sentence(d_store, wants, schema, sentence):
    response = d_store.resolve_raw(SCOPE, "render_chart", wants, {"dataset": DATASET}, schema)
    assert response.status_code == 422, response.content
    assert response.json() == {"error": sentence, "code": "ERR_INVALID_WANTS"}


def test_resolve_wants_checks_stop_at_the_first_bad_argument_in_declaration_order(d_store):
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "string"}}}
    response = d_store.resolve_raw(SCOPE, "t", {"a": "k", "c": "k"}, {}, schema)
    assert response.status_code == 422
    assert response.json()["error"].startswith("defineTool: tool 't' declares wants.a, but inputSchema declares")


def test_resolve_wants_checks_go_in_javascripts_key_order_array_indices_first(d_store):
    schema = {"type": "object", "properties": {"b": {"type": "number"}, "1": {"type": "number"}}}
    response = d_store.resolve_raw(SCOPE, "t", {"b": "k", "1": "k"}, {}, schema)
    assert response.status_code == 422
    assert response.json()["error"].startswith("defineTool: tool 't' declares wants.1, but inputSchema declares")


def test_resolve_wants_argument_named_like_an_inherited_property_passes_the_properties_check(d_store):
    """`'toString' in {}` is true in JavaScript: the seed does not refuse it, so neither do we."""
    response = d_store.resolve_raw(SCOPE, "t", {"toString": "k"}, {}, {"type": "object", "properties": {}})
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(("name", "spoken"), [("toString", "a function"), ("__proto__", "a object")])
def test_resolve_reads_an_argument_only_the_prototype_holds_as_spoken_as_javascript_does(d_store, name, spoken):
    """The seed tests `argName in args`, which finds Object.prototype's members: it refuses their value."""
    response = d_store.resolve_raw(SCOPE, "t", {name: "k"}, {})
    assert response.status_code == 200, response.content
    refusal = response.json()["refusals"][0]
    assert refusal["detail"].startswith(f"'{name}' must be an artifact ref STRING (an art_… ticket), not {spoken} — ")


# --- the live-refs listing rule (§6.3): newest first, 10 listed, 200 scanned ----------------------
def test_resolve_lists_at_most_ten_live_refs_newest_first(harness):
    store = harness.create_store()
    model = store_for_project(project=store.project)
    base = 1_796_043_000_000
    minted = orm_put_many(
        model,
        SCOPE,
        [
            {
                "kind": "dataset/rows",
                "media_type": "application/json",
                "shape": "json",
                "body": js_json([i]).encode(),
                "label": f"rows {i}",
                "created_at": base + i * 10,
            }
            for i in range(12)
        ],
    )
    result = store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": UNKNOWN})

    newest_ten = sorted(minted, key=lambda a: a.created_at, reverse=True)[:10]
    listed = re.findall(r"art_[A-Za-z0-9]{22}(?= \()", result["refusals"][0]["detail"])
    assert listed == [a.ref for a in newest_ten]
    assert result["refusals"][0]["detail"].endswith(
        live_clause("dataset/rows", [{"ref": a.ref, "label": a.label, "bytes": a.bytes} for a in newest_ten])
    )


@pytest.mark.parametrize(("newer_others", "listed"), [(199, True), (200, False), (205, False)])
def test_resolve_live_ref_scan_stops_at_two_hundred_rows(harness, newer_others, listed):
    store = harness.create_store()
    model = store_for_project(project=store.project)
    base = 1_796_043_000_000
    (matching,) = orm_put_many(
        model, SCOPE, [{"kind": "dataset/rows", "body": b"[]", "shape": "json", "created_at": base, "label": "old"}]
    )
    orm_put_many(
        model,
        SCOPE,
        [{"kind": "note/text", "body": b"n", "created_at": base + 1 + i} for i in range(newer_others)],
    )
    result = store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": UNKNOWN})
    detail = result["refusals"][0]["detail"]
    expected = live_clause("dataset/rows", [{"ref": matching.ref, "label": "old", "bytes": 2}] if listed else [])
    assert detail.endswith(expected)
    assert (matching.ref in detail) is listed


def test_resolve_live_refs_skip_expired_and_foreign_scope_artifacts(harness, kit):
    store = harness.create_store()
    store_now = kit.now(store)
    live, _ = store.put(SCOPE, kind="dataset/rows", media_type="application/json", data=[1], label="live")
    brief, _ = store.put(
        SCOPE, kind="dataset/rows", media_type="application/json", data=[2], label="brief", expires_at=store_now + 5_000
    )
    store.put({**SCOPE, "principal": "someone-else"}, kind="dataset/rows", media_type="application/json", data=[3])
    kit.advance(store, 5_001)

    result = store.resolve(SCOPE, "render_chart", RENDER_CHART_WANTS, {"dataset": brief["ref"]})

    assert result["refusals"][0]["reason"] == "missing-or-expired"
    assert result["refusals"][0]["detail"] == (
        f"'dataset' = {brief['ref']} does not resolve in this run's scope — expired, swept, or never stored here. "
        + live_clause("dataset/rows", [live])
    )
    assert REF_RE.fullmatch(live["ref"])
