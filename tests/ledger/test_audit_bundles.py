"""Audit bundles: the framework's canonicalization, verification answers, import and export."""

import copy
import json

import pytest

from footprint_site.lib.cjson import canonical
from ledger.audits.selectors import audit_bundle_stored_verdict
from ledger.audits.verify import build_bundle, record_hash, verify_bundles
from ledger.models import AuditBundle
from tests.conftest import DATA, fixture_events, load_fixture

pytestmark = pytest.mark.django_db

RESULTS = load_fixture("f-audit/verify-results.json")["results"]


def test_canonical_matches_the_spec_vector():
    value = json.loads('{"b":1,"a":[1e21,1e-7,0.000001,100,1.5,-0,"é\\n\\"\\u0001"],"Z":null,"Ａ":1,"😀":2}')  # noqa: RUF001 - the spec vector sorts a full-width key
    assert canonical(value) == '{"Z":null,"a":[1e+21,1e-7,0.000001,100,1.5,0,"é\\n\\"\\u0001"],"b":1,"😀":2,"Ａ":1}'  # noqa: RUF001 - the spec vector sorts a full-width key


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1.0, "1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1.5e-7, "1.5e-7"),
        (2**60, "1152921504606847000"),
        (123456789012345680000.0, "123456789012345680000"),
        (-0.0, "0"),
        (1e-6, "0.000001"),
        (5e-324, "5e-324"),
    ],
)
def test_canonical_numbers_print_as_javascript_does(number, text):
    assert canonical(number) == text


def test_record_hashes_match_the_spec_vectors():
    genesis = {
        "seq": 0,
        "timestamp": 1700000000000,
        "eventType": "audit.genesis",
        "payload": {
            "runId": "run-1",
            "library": {"name": "agentfootprint", "version": "9.62.0"},
            "payloadMode": "bounded",
        },
        "meta": {"runId": "run-1"},
        "prevHash": "0" * 64,
    }
    first = record_hash(genesis)
    assert first == "51f3f310f3a5188d874cef041f6c1351b2fe460e322e2b19fe3092e36be9ac2b"
    decision = {
        "seq": 1,
        "timestamp": 1700000000001,
        "eventType": "agentfootprint.middleware.decision",
        "payload": {
            "middleware": "refund-ceiling",
            "moment": "before-tool",
            "at": "tool",
            "toolName": "issue_refund",
            "toolCallId": "tc-1",
            "iteration": 1,
            "outcome": "ask",
            "changed": False,
            "why": "Approve a £1,200 refund?",
        },
        "meta": {
            "runId": "run-1",
            "runtimeStageId": "sf-tools/execute-tool-calls#8",
            "runOffsetMs": 1,
            "subflowPath": ["sf-tools"],
            "compositionPath": [],
        },
        "prevHash": first,
    }
    assert record_hash(decision) == "9f629cb8558f15f04648913125da10658f8142c2625e3183d6ed3dceef6fcbbd"


def _bundle():
    return json.loads((DATA / "f-audit/bundle.json").read_text())


def _without(bundle, index):
    changed = copy.deepcopy(bundle)
    del changed["records"][index]
    changed["header"]["recordCount"] -= 1
    return changed


def _swapped(bundle):
    changed = copy.deepcopy(bundle)
    changed["records"][4], changed["records"][5] = changed["records"][5], changed["records"][4]
    return changed


def _field_added(bundle):
    changed = copy.deepcopy(bundle)
    changed["records"][2]["payload"]["added"] = True
    return changed


def _final_altered(bundle):
    changed = copy.deepcopy(bundle)
    changed["finalHash"] = "ab" * 32
    return changed


def test_verify_answers_exactly_as_the_framework_does():
    bundle = _bundle()
    segments = load_fixture("f-audit/segments.json")["segments"]
    cases = {
        "bundle.json": bundle,
        "bundle-tampered-byte.json": json.loads((DATA / "f-audit/bundle-tampered-byte.json").read_text()),
        "bundle.json with records[3] removed (recordCount adjusted)": _without(bundle, 3),
        "bundle.json with records[4] and records[5] swapped": _swapped(bundle),
        "bundle.json with a field added to records[2].payload": _field_added(bundle),
        "bundle.json with finalHash altered": _final_altered(bundle),
        "segments.json [seg1, seg2]": segments,
        "segments.json [seg2, seg1]": segments[::-1],
        "segments.json seg2 alone": segments[1],
        "[] (no bundles)": [],
    }
    for name, value in cases.items():
        assert verify_bundles(value) == RESULTS[name], name


def test_build_bundle_reproduces_the_frameworks_hashes():
    """Re-chaining the fixture's records reproduces every hash: the export speaks the same format."""
    bundle = _bundle()
    records = [{k: v for k, v in r.items() if k not in ("seq", "prevHash", "hash")} for r in bundle["records"]]
    rebuilt = build_bundle(records, exported_at=bundle["header"]["exportedAt"])
    assert [r["hash"] for r in rebuilt["records"]] == [r["hash"] for r in bundle["records"]]
    assert rebuilt["finalHash"] == bundle["finalHash"]
    assert verify_bundles(rebuilt) == {"valid": True, "recordsChecked": 52}


def test_import_stores_the_bundle_byte_for_byte_and_answers_the_verdict(agent_client):
    raw = (DATA / "f-audit/bundle.json").read_bytes()
    response = agent_client.post("/api/v1/audit-bundles", raw, content_type="application/json")
    assert response.status_code == 201
    body = response.json()
    assert (body["valid"], body["recordsChecked"], body["continuity"]) == (True, 52, {"state": "genesis"})
    assert bytes(AuditBundle.objects.get(pk=body["id"]).body) == raw
    again = agent_client.post("/api/v1/audit-bundles", raw, content_type="application/json")
    assert again.status_code == 200
    assert AuditBundle.objects.count() == 1


def test_import_of_a_tampered_bundle_names_the_broken_record(agent_client):
    raw = (DATA / "f-audit/bundle-tampered-byte.json").read_bytes()
    body = agent_client.post("/api/v1/audit-bundles", raw, content_type="application/json").json()
    assert (body["valid"], body["brokenAt"]) == (False, 14)
    assert body["reason"].startswith("hash mismatch")


def test_import_checks_continuity_with_earlier_segments(agent_client):
    first, second = load_fixture("f-audit/segments.json")["segments"]
    alone = agent_client.post_json("/api/v1/audit-bundles", second).json()
    assert alone["continuity"] == {"state": "unanchored"}
    agent_client.post_json("/api/v1/audit-bundles", first)
    joined = agent_client.post_json("/api/v1/audit-bundles", {"segments": [second]}).json()
    assert joined["valid"] is True
    assert joined["continuity"]["state"] == "continues"
    assert joined["continuity"]["predecessorValid"] is True


def test_a_segment_continuing_a_stored_tampered_one_says_its_predecessor_is_invalid(agent_client):
    first, second = load_fixture("f-audit/segments.json")["segments"]
    first["records"][1]["payload"] = {"edited": True}  # its hash no longer matches; finalHash unchanged
    assert agent_client.post_json("/api/v1/audit-bundles", first).json()["valid"] is False

    joined = agent_client.post_json("/api/v1/audit-bundles", second).json()

    assert joined["valid"] is True  # the segment itself is sound
    assert joined["continuity"]["state"] == "continues"
    assert joined["continuity"]["predecessorValid"] is False


def test_a_first_seq_written_as_a_whole_float_is_that_number_as_in_javascript(agent_client):
    """§5.7 compares seqs as JavaScript numbers: JSON's 0.0 is 0 there (the header is not hashed)."""
    raw = (DATA / "f-audit/bundle.json").read_bytes().replace(b'"firstSeq": 0,', b'"firstSeq": 0.0,', 1)
    body = agent_client.post("/api/v1/audit-bundles", raw, content_type="application/json").json()
    assert (body["valid"], body["recordsChecked"]) == (True, 52), body
    assert AuditBundle.objects.get(pk=body["id"]).first_seq == 0

    first, second = load_fixture("f-audit/segments.json")["segments"]
    second["header"]["firstSeq"] = 52.0
    assert verify_bundles([first, second]) == {"valid": True, "recordsChecked": 104}


def test_a_segment_continues_the_sound_copy_of_its_predecessor_not_a_tampered_one_stored_later(agent_client):
    first, second = load_fixture("f-audit/segments.json")["segments"]
    genuine = agent_client.post_json("/api/v1/audit-bundles", first).json()
    tampered = copy.deepcopy(first)
    tampered["records"][1]["payload"] = {"edited": True}  # same finalHash, invalid
    assert agent_client.post_json("/api/v1/audit-bundles", tampered).json()["valid"] is False

    joined = agent_client.post_json("/api/v1/audit-bundles", second).json()

    assert joined["valid"] is True
    assert joined["continuity"] == {"state": "continues", "bundleId": genuine["id"], "predecessorValid": True}


def test_a_truncated_copy_of_the_predecessor_stored_later_does_not_break_a_sound_segment(agent_client):
    first, second = load_fixture("f-audit/segments.json")["segments"]
    genuine = agent_client.post_json("/api/v1/audit-bundles", first).json()
    cut = copy.deepcopy(first)
    del cut["records"][-5:]
    cut["header"]["recordCount"] = len(cut["records"])  # finalHash kept: an invalid bundle
    assert agent_client.post_json("/api/v1/audit-bundles", cut).json()["valid"] is False

    joined = agent_client.post_json("/api/v1/audit-bundles", second).json()

    assert joined["valid"] is True, joined
    assert joined["continuity"] == {"state": "continues", "bundleId": genuine["id"], "predecessorValid": True}


def test_an_empty_segment_sent_again_still_continues_its_predecessor_not_itself(agent_client):
    """An empty drained segment's chainHead is its own finalHash: the lookup must skip the bundle itself."""
    first, _ = load_fixture("f-audit/segments.json")["segments"]
    seg1 = agent_client.post_json("/api/v1/audit-bundles", first).json()
    empty = {
        "header": {**first["header"], "firstSeq": 52, "recordCount": 0, "chainHead": first["finalHash"]},
        "records": [],
        "finalHash": first["finalHash"],
    }
    once = agent_client.post_json("/api/v1/audit-bundles", empty).json()
    again = agent_client.post_json("/api/v1/audit-bundles", empty).json()

    assert (
        once["continuity"]
        == again["continuity"]
        == {
            "state": "continues",
            "bundleId": seg1["id"],
            "predecessorValid": True,
        }
    )
    assert AuditBundle.objects.get(pk=once["id"]).continues_id == seg1["id"]


def _edit_stored_body(bundle_id):
    edited = json.loads(bytes(AuditBundle.objects.get(pk=bundle_id).body))
    edited["header"]["exportedAt"] = 1  # any edit of the stored bytes
    AuditBundle.objects.filter(pk=bundle_id).update(body=json.dumps(edited).encode())


def test_an_edited_empty_segment_is_verified_again_and_continued_without_looking_itself_up(agent_client):
    """An edited stored body is verified again; an empty segment's chainHead is its own finalHash,
    so that check must not find the bundle itself (it recursed until Python's limit: a 500)."""
    first, second = load_fixture("f-audit/segments.json")["segments"]
    agent_client.post_json("/api/v1/audit-bundles", first)
    empty = {
        "header": {**first["header"], "firstSeq": 52, "recordCount": 0, "chainHead": first["finalHash"]},
        "records": [],
        "finalHash": first["finalHash"],
    }
    empty_id = agent_client.post_json("/api/v1/audit-bundles", empty).json()["id"]
    _edit_stored_body(empty_id)

    verdict, changed = audit_bundle_stored_verdict(bundle=AuditBundle.objects.get(pk=empty_id))
    assert (changed, verdict["valid"]) == (True, True)
    response = agent_client.post_json("/api/v1/audit-bundles", second)
    assert response.status_code == 201, response.content[:300]
    assert response.json()["valid"] is True


def test_import_refuses_what_is_not_a_bundle(agent_client):
    response = agent_client.post_json("/api/v1/audit-bundles", {"records": []})
    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_AUDIT_BUNDLE"
    assert AuditBundle.objects.count() == 0


def test_export_of_an_ingested_run_verifies(agent_client):
    events = fixture_events("b-middleware/events-declined.json")
    agent_client.ingest(events)
    run_id = events[0]["meta"]["runId"]
    bundle = agent_client.get(f"/api/v1/runs/{run_id}/audit-bundle").json()
    assert bundle["header"]["format"] == "agentfootprint.audit/1"
    assert verify_bundles(bundle) == {
        "valid": True,
        "recordsChecked": 1 + sum(e["meta"]["runId"] == run_id for e in events),
    }
    assert bundle["records"][0]["eventType"] == "audit.genesis"
    assert all("wallClockMs" not in r["meta"] for r in bundle["records"])


def test_export_of_another_projects_run_is_404(agent_client, other_agent_client):
    events = fixture_events("a-run-recording/events.json")
    agent_client.ingest(events)
    response = other_agent_client.get(f"/api/v1/runs/{events[0]['meta']['runId']}/audit-bundle")
    assert response.status_code == 404
