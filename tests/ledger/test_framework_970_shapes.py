"""agentfootprint 9.63 to 9.70 on the run page and in the refusal trace: the typed result shapes
(absent, coverage, semantic) said in words with the framework's published strings, string-shape
validation issues with their value and hint, and unsupported-argument findings traced to their call."""

import json
import re
from html import unescape
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from artifacts.models import Artifact
from artifacts.scopes import Scope
from artifacts.services import store_for_project
from ledger.explorer.result_shapes import read_absence, read_coverage, read_semantics, shapes_of_result
from ledger.framework.canonical_notes import PATH, VERSION, canonical_notes
from ledger.models import Refusal, Run
from tests.artifacts.conftest import orm_put
from tests.conftest import fixture_events, load_fixture

pytestmark = pytest.mark.django_db

RUN_62 = "run-1796532316940-1"  # mock-9.62-shapes.json, produced by the built 9.62.0 framework
RUN_70 = "run-1796900000000-1"  # events-9.70.json, written from the 9.70 source
PLACED_REF = "art_H70resultKindRows00000"
SHARED_NOTES = Path("/work/shared/spec/agentfootprint-9.70-canonical-notes.json")


def tab(project, run_id: str, name: str) -> str:
    return f"/projects/{project.slug}/runs/{run_id}/tab/{name}/"


def dispatch_of(html: str, call_id: str) -> str:
    articles = re.findall(r'<article class="dispatch">(.*?)</article>', html, re.S)
    (found,) = [a for a in articles if f'<span class="muted">{call_id}</span>' in a]
    return found


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


@pytest.fixture
def run_62(agent_client) -> str:
    assert agent_client.ingest(fixture_events("h-9.70/mock-9.62-shapes.json")).status_code == 200
    return RUN_62


@pytest.fixture
def run_70(agent_client) -> str:
    assert agent_client.ingest(fixture_events("h-9.70/events-9.70.json")).status_code == 200
    return RUN_70


# --- the canonical strings ---------------------------------------------------------------------


def test_canonical_notes_are_read_from_the_framework_file_kept_unchanged():
    notes = canonical_notes()
    published = json.loads(PATH.read_text(encoding="utf-8"))
    assert VERSION in PATH.name
    assert notes.absence_note == published["notes"]["ABSENCE_NOTE"]
    assert notes.coverage_note == published["notes"]["COVERAGE_NOTE"]
    assert notes.semantics_note == published["notes"]["SEMANTICS_NOTE"]
    assert (notes.absence_marker, notes.coverage_marker, notes.semantics_marker) == (
        "af_absent",
        "af_coverage",
        "af_semantics",
    )
    assert notes.coverage_heading == "Coverage of this answer"
    if SHARED_NOTES.exists():  # the spec's copy of the published file, where it is at hand
        assert PATH.read_bytes() == SHARED_NOTES.read_bytes()


def test_9_62_framework_wrote_the_absence_and_semantics_notes_9_70_publishes():
    events = load_fixture("h-9.70/mock-9.62-shapes.json")["events"]
    notes = canonical_notes()
    absence = next(e for e in events if e["payload"].get("toolCallId") == "h1" and e["type"].endswith("tool_end"))
    assert absence["payload"]["result"]["note"] == notes.absence_note
    semantics = next(e for e in events if e["type"].endswith("semantics_declared"))
    assert semantics["payload"]["semantics"]["note"] == notes.semantics_note
    # COVERAGE_NOTE changed wording after 9.62: the page says so rather than hide it.
    ledger = next(e for e in events if e["payload"].get("toolCallId") == "h2" and e["type"].endswith("tool_end"))
    assert ledger["payload"]["result"]["af_coverage"]["note"] != notes.coverage_note


# --- recognition, strict like the framework's ------------------------------------------------


def test_recognition_needs_the_marker_exactly_true_and_something_declared():
    assert read_absence({"af_absent": "yes", "checked": ["x"]}) is None
    assert read_absence({"af_absent": True, "checked": []}) is None
    assert read_absence('{"af_absent": true, "checked": ["x"]}') is None  # JSON text is data
    assert read_coverage({"af_coverage": {"checked": ["x"]}}) == []  # no result beside it
    assert read_coverage({"af_coverage": {}, "result": 1}) == []  # declares no boundary
    assert read_semantics({"af_semantics": True, "grain": {"interval": "1m"}}) is None  # nothing to caveat
    assert shapes_of_result([{"af_absent": True, "checked": ["x"]}]) == []
    absence = {"af_absent": True, "checked": ["a"]}
    nested = shapes_of_result({"af_coverage": {"cannot_cover": ["peer fabric"]}, "result": absence})
    assert [s.shape for s in nested] == ["coverage", "absence"]


# --- the run page --------------------------------------------------------------------------------


def test_tools_tab_says_what_each_result_covered_and_did_not(auditor_client, project, run_62):
    html = auditor_client.get(tab(project, run_62, "tools")).content.decode()
    absence = text_of(dispatch_of(html, "h1"))
    assert "Coverage of this answer" in absence
    assert (
        "looked for FLOGI entries on fc1/3 and found nothing; this answer covered only shq-fab-a: the live fcns "
        "database, window: the last 24h — FLOGI history retention; not checked the archived FLOGI history — older "
        "than the 24h window; cannot cover ports on the peer fabric — this collector is scoped to one fabric"
    ) in absence
    assert canonical_notes().absence_note in absence
    ledger_html = dispatch_of(html, "h2")
    assert "the API timed out &lt;retry&gt;" in ledger_html
    assert "<retry>" not in ledger_html
    ledger = text_of(ledger_html)
    assert "this answer covered only SRDF pair state on all 4 arrays (live query)" in ledger
    assert "cannot cover host-side multipathing — no collector runs on the ESX hosts" in ledger
    assert "The result carries another wording" in ledger  # 9.62's COVERAGE_NOTE
    semantics = text_of(dispatch_of(html, "h3"))
    assert "this answer covered only shq-fab-a: all 48 FC ports; not checked the peer fabric" in semantics
    assert "grain: interval 30m, aggregation avg, not a counter" in semantics
    assert "provenance: measured at 2026-08-26T10:00:00Z, 3600 seconds old, from InfluxDB SwitchPortStats" in semantics
    assert "Coverage of this answer" not in dispatch_of(html, "h4")  # a plain validation error


def test_tools_tab_shows_a_9_70_ledger_note_as_the_published_one(auditor_client, project, run_70):
    html = auditor_client.get(tab(project, run_70, "tools")).content.decode()
    ledger = text_of(dispatch_of(html, "h4"))
    assert canonical_notes().coverage_note in ledger
    assert "another wording" not in ledger
    assert "not checked tape vaults" in text_of(dispatch_of(html, "h2"))


def test_tools_tab_reads_every_call_semantic_envelopes_in_one_query(auditor_client, project, run_62):
    with CaptureQueriesContext(connection) as queries:
        assert auditor_client.get(tab(project, run_62, "tools")).status_code == 200
    reads = [q["sql"] for q in queries.captured_queries if "tools.semantics_declared" in q["sql"]]
    assert len(reads) == 1


# --- refusals: validation issues and the unsupported-argument check ----------------------------


def test_string_shape_issue_keeps_value_and_hint_in_the_refusal(run_70):
    refusal = Refusal.objects.get(run__run_id=run_70, category="validation")
    events = load_fixture("h-9.70/events-9.70.json")["events"]
    (invalid,) = [e for e in events if e["type"] == "agentfootprint.validation.args_invalid"]
    excerpt = invalid["payload"]["issues"][0]["value"]
    assert len(excerpt) == 81  # 80 characters of the value, then the ellipsis
    assert excerpt.endswith("…")
    assert refusal.reason == (
        f"volumeId: expected a string matching ^vol-[0-9]+$, got {json.dumps(excerpt, ensure_ascii=False)}"
        " (described as: A volume id like vol-0042)"
    )


def test_unsupported_argument_is_a_refusal_of_the_call_it_names(run_70):
    refusal = Refusal.objects.get(run__run_id=run_70, category="integrity")
    assert (refusal.rule, refusal.tool_name, refusal.tool_call_id, refusal.iteration) == (
        "unsupported-argument",
        "backup_status",
        "h2",
        2,
    )
    assert refusal.reason.startswith("'backup_status' was called with machine = \"nightly-fin\"")
    assert Run.objects.get(run_id=run_70).refusal_count == 2


def test_9_62_validation_refusals_read_as_before(run_62):
    refusal = Refusal.objects.get(run__run_id=run_62, category="validation")
    assert refusal.reason == "volumeId: expected string, got number"


def test_validation_refusal_page_shows_value_and_hint(auditor_client, run_70):
    refusal = Refusal.objects.get(run__run_id=run_70, category="validation")
    html = auditor_client.get(f"/refusals/{refusal.pk}/").content.decode()
    section = html[html.index('<section id="chain-validation-issues"') :]
    section = section[: section.index("</section>")]
    assert "<code>volumeId</code>" in section
    assert "a string matching ^vol-[0-9]+$" in section
    assert "&quot;yes please, map these ids to volume names" in section
    assert '<td class="issue-hint">A volume id like vol-0042</td>' in section


def test_unsupported_argument_refusal_page_traces_the_call_and_the_run_checkers(auditor_client, run_70):
    refusal = Refusal.objects.get(run__run_id=run_70, category="integrity")
    html = auditor_client.get(f"/refusals/{refusal.pk}/").content.decode()
    integrity = html[html.index('<section id="chain-integrity"') :]
    integrity = integrity[: integrity.index("</section>")]
    assert "<code>unsupported-argument</code> at the choice seam" in integrity
    assert "tool call h2: argument &#x27;machine&#x27; as the model chose it" in integrity
    rows = re.findall(r'<tr class="disposition-row([^"]*)"><td><code>([^<]+)</code></td><td>([^<]+)</td>', integrity)
    assert [(check, seam) for _, check, seam in rows] == [
        ("invariant-violation", "wire"),
        ("invariant-violation", "compose"),
        ("dangling-reference", "compose"),
        ("unsupported-argument", "choice"),
        ("unsupported-claim", "claim"),
    ]
    assert [mark for mark, check, _ in rows if mark] == [" refusal-here"]
    call = html[html.index('<section id="chain-tool-call"') :]
    call = call[: call.index("</section>")]
    assert "backup_status" in call
    # What the tool said it could not see: the context of the wrong answer, escaped.
    assert "not checked tape vaults — offline, never indexed &lt;vault&gt;" in call
    assert "cannot cover machines outside the backup domain — this tool reads one catalogue" in call


def test_refusal_list_counts_the_new_check_like_the_others(auditor_client, run_70):
    html = auditor_client.get("/refusals/").content.decode()
    counts = dict(re.findall(r'<span class="tag" data-count="([^"]+)">(\d+)</span>', html))
    assert counts["integrity"] == "1"
    assert counts["validation"] == "1"
    assert "unsupported-argument" in auditor_client.get("/refusals/?category=integrity").content.decode()


# --- result kinds on the run page ----------------------------------------------------------------


def test_artifacts_tab_names_a_result_placed_under_the_declared_kind(auditor_client, project, run_70):
    store = store_for_project(project=project)
    scope = Scope("acme", "analyst", "c1")
    orm_put(
        store,
        scope,
        body=b"[]",
        ref=PLACED_REF,
        kind="dataset/rows",
        created_at=1796900000015,
        origin={"runId": RUN_70, "toolCallId": "h3"},
    )
    orm_put(
        store,
        scope,
        body=b"x",
        kind="tool-result/backup_status",
        created_at=1796900000016,
        origin={"runId": RUN_70, "toolCallId": "h2"},
    )
    html = auditor_client.get(tab(project, run_70, "artifacts")).content.decode()
    assert Artifact.objects.filter(origin_run_id=RUN_70).count() == 2
    assert '<code class="artifact-kind">dataset/rows</code>' in html
    assert "(the result of export_rows (call h3), placed under the result kind the tool declares)" in html
    assert "(the default result kind of tool backup_status)" in html
