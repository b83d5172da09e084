"""Chain anchors: signed checkpoints of every run's head, kept apart from the rows they cover.

The attacks here have write access to the database but not to FOOTPRINT_ANCHOR_KEY: they cut
the tail of a run and rewrite the run's own head columns to match, which the chain alone cannot
notice; the anchor does.
"""

import json

import pytest
from django.db import connection

from footprint_site.lib.chain import link_hash
from ledger.audits import anchors, integrity_selectors
from ledger.audits.integrity import chain_anchors_write, integrity_check_request
from ledger.audits.integrity_selectors import run_chain_verify
from ledger.models import AnchoredHead, ChainAnchor, IntegrityCheck, Run, RunEvent
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db
RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events


@pytest.fixture
def run(agent_client, project) -> Run:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    return Run.objects.get(project=project, run_id=RUN_ID)


def cut_tail(run: Run, keep: int) -> None:
    """Delete every record from `keep` on and make the run row agree, as a careful forger would."""
    last = RunEvent.objects.get(run=run, position=keep - 1)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ledger_runevent WHERE run_id = %s AND position >= %s", [run.pk, keep])
        cur.execute(
            "UPDATE ledger_run SET chain_length = %s, event_count = %s, head_hash = %s WHERE id = %s",
            [keep, keep, bytes(last.hash), run.pk],
        )


def test_a_cut_tail_with_a_rewritten_head_passes_the_chain_walk_without_an_anchor(run):
    cut_tail(run, keep=70)
    run.refresh_from_db()
    assert run_chain_verify(run=run).valid  # why anchors exist


def test_the_anchor_detects_a_cut_tail_with_a_rewritten_head(run, agent_client):
    assert chain_anchors_write() == 1
    cut_tail(run, keep=70)
    run.refresh_from_db()
    verdict = run_chain_verify(run=run)
    assert not verdict.valid
    assert "anchor 1" in verdict.reason
    assert "saw 76 records but 70 are stored" in verdict.reason
    body = agent_client.get(f"/api/v1/runs/{RUN_ID}/verify").json()
    assert body["valid"] is False
    assert "removed from the end" in body["reason"]


def test_the_anchor_detects_a_rewritten_chain_of_the_same_length(run):
    chain_anchors_write()
    head = RunEvent.objects.get(run=run, position=75)
    forged = bytes(32)
    RunEvent.objects.filter(pk=head.pk).update(hash=forged)
    Run.objects.filter(pk=run.pk).update(head_hash=forged)
    run.refresh_from_db()
    verdict = run_chain_verify(run=run)
    assert not verdict.valid  # the walk itself catches the hash; the anchor agrees


def test_an_edited_anchor_is_reported_as_edited(run):
    chain_anchors_write()
    AnchoredHead.objects.update(chain_length=70)
    cut_tail(run, keep=70)
    run.refresh_from_db()
    verdict = run_chain_verify(run=run)
    assert not verdict.valid
    assert "no longer matches its signature" in verdict.reason


def test_anchors_cover_only_what_grew_and_chain_to_each_other(run, agent_client):
    assert chain_anchors_write() == 1
    assert chain_anchors_write() == 0  # nothing new: no anchor
    more = [{**e, "seq": e["seq"]} for e in fixture_events("e-tool-effects/events.json")]
    assert agent_client.ingest(more).status_code == 200
    assert chain_anchors_write() == 1
    first, second = ChainAnchor.objects.order_by("number")
    assert second.number == 2
    assert bytes(second.prev_digest) == bytes(first.digest)
    assert second.run_count == 1  # only the new run grew
    assert all(integrity_selectors.anchor_signature_problem(a) is None for a in (first, second))


def test_an_anchor_signed_with_another_key_does_not_hold(run, settings):
    chain_anchors_write()
    settings.FOOTPRINT_ANCHOR_KEY = "another key"
    assert integrity_selectors.anchor_signature_problem(ChainAnchor.objects.get())


RUN_E = "run-1796043015109-1"  # e-tool-effects: 222 events


def test_heads_rewritten_into_one_with_the_same_tab_separated_text_break_the_signature(run, agent_client, project):
    """A run id may hold a tab or newline: in format 1's text the heads (A, 76, hA) and (E, 222, hE)
    read the same as one head ("A\t76\t<hA>\nE", 222, hE), which let a forger delete run A unseen."""
    assert agent_client.ingest(fixture_events("e-tool-effects/events.json")).status_code == 200
    assert chain_anchors_write() == 1
    head_a, head_e = AnchoredHead.objects.get(run_id=RUN_ID), AnchoredHead.objects.get(run_id=RUN_E)
    merged = f"{RUN_ID}\t{head_a.chain_length}\t{bytes(head_a.head_hash).hex()}\n{RUN_E}"
    AnchoredHead.objects.filter(pk=head_e.pk).update(run_id=merged)
    head_a.delete()
    Run.objects.create(project=project, run_id=merged, chain_length=head_e.chain_length)
    run.delete()

    assert integrity_selectors.anchor_signature_problem(head_e.anchor) == (
        "no longer matches its signature: the anchors were edited"
    )
    assert not integrity_selectors.project_anchors_audit(project=project).valid


def test_an_anchor_signed_in_format_1_still_holds_unless_a_run_id_makes_its_text_ambiguous(run, project):
    heads = [(RUN_ID, run.chain_length, bytes(run.head_hash))]
    digest = anchors.anchor_digest(
        project_slug=project.slug, number=1, prev_digest=bytes(32), heads=heads, digest_format=1
    )
    anchor = ChainAnchor.objects.create(
        project=project, number=1, prev_digest=bytes(32), digest=digest, signature=anchors.sign(digest),
        run_count=1, digest_format=1,
    )  # fmt: skip
    AnchoredHead.objects.create(anchor=anchor, project=project, run_id=RUN_ID, chain_length=76, head_hash=heads[0][2])
    assert integrity_selectors.anchor_signature_problem(anchor) is None
    assert run_chain_verify(run=run).valid

    tabbed = [("a\tb", 1, bytes(32))]
    digest = anchors.anchor_digest(
        project_slug=project.slug, number=2, prev_digest=digest, heads=tabbed, digest_format=1
    )
    anchor = ChainAnchor.objects.create(
        project=project, number=2, prev_digest=bytes(anchor.digest), digest=digest, signature=anchors.sign(digest),
        run_count=1, digest_format=1,
    )  # fmt: skip
    AnchoredHead.objects.create(anchor=anchor, project=project, run_id="a\tb", chain_length=1, head_hash=bytes(32))
    assert integrity_selectors.anchor_signature_problem(anchor).startswith("cannot vouch for its heads")


def test_a_record_added_past_the_head_without_touching_the_run_row_is_named(run):
    head = bytes(run.head_hash)
    forged = {
        "meta": {"runId": RUN_ID, "wallClockMs": 1796043009999},
        "payload": {"toolCallId": "t9", "toolName": "issue_refund", "args": {"amount": 10_000}},
        "seq": 76,
        "type": "agentfootprint.stream.tool_start",
    }
    body = json.dumps(forged, sort_keys=True, separators=(",", ":"))
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ledger_runevent (run_id, period, position, seq, type, tool_call_id, wall_clock_ms, body,"
            " doc, prev_hash, hash) VALUES (%s, %s, 76, 76, %s, 't9', 1796043009999, %s, %s::jsonb, %s, %s)",
            [run.pk, run.period, forged["type"], body, body, head, link_hash(head, body.encode())],
        )

    verdict = run_chain_verify(run=run)

    assert (verdict.valid, verdict.broken_at) == (False, 76)
    assert verdict.reason == "record 76 lies past the run's recorded head (76 records): ingestion did not write it"


def test_the_walk_reports_progress_chunk_by_chunk(run, monkeypatch):
    monkeypatch.setattr(integrity_selectors, "WALK_CHUNK", 20)
    seen: list[int] = []
    assert run_chain_verify(run=run, progress=seen.append).valid
    assert seen == [20, 40, 60, 76]


def test_a_check_request_on_a_short_chain_answers_at_once(run, auditor):
    check = integrity_check_request(run=run, user=auditor)
    assert (check.status, check.valid, check.records_checked) == ("done", True, 76)
    assert IntegrityCheck.objects.get().requested_by == auditor


def test_the_project_audit_finds_a_run_deleted_outright(run, auditor_client, project):
    chain_anchors_write()
    url = f"/projects/{project.slug}/anchors/"
    assert "intact" in auditor_client.get(url).content.decode()
    Run.objects.filter(pk=run.pk).delete()  # its events and projections go with it (cascade)
    html = auditor_client.get(url).content.decode()
    assert f"run &#x27;{RUN_ID}&#x27; was anchored with 76 records and no longer exists" in html


def test_the_project_audit_finds_a_removed_anchor(run, agent_client):
    chain_anchors_write()
    assert agent_client.ingest(fixture_events("e-tool-effects/events.json")).status_code == 200
    chain_anchors_write()
    ChainAnchor.objects.filter(number=1).delete()
    audit = integrity_selectors.project_anchors_audit(project=run.project)
    assert audit.problems[0] == "anchor 1 is missing: the next one stored is anchor 2"


def test_the_project_audit_is_404_for_an_outsider(outsider_client, project):
    assert outsider_client.get(f"/projects/{project.slug}/anchors/").status_code == 404
