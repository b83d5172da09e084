"""The run page's tabs and its on-demand integrity check."""

import re

import pytest
from django.db import connection

from ledger.audits.integrity import integrity_check_run
from ledger.models import IntegrityCheck, RunEvent
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def declined_run(agent_client) -> str:
    events = fixture_events("b-middleware/events-declined.json")
    agent_client.ingest(events)
    return events[0]["meta"]["runId"]


def tab(project, run_id: str, name: str) -> str:
    return f"/projects/{project.slug}/runs/{run_id}/tab/{name}/"


def test_tool_calls_tab_shows_each_dispatch_in_order(auditor_client, project, declined_run):
    html = auditor_client.get(tab(project, declined_run, "tools")).content.decode()
    assert html.count('class="dispatch"') == 3
    t3 = html[html.index("transfer_funds") :]
    stages = ["execution started", "before-tool decision", "execution ended"]
    assert [t3.index(stage) for stage in stages] == sorted(t3.index(stage) for stage in stages)


def test_tool_calls_tab_marks_the_step_that_refused(auditor_client, project, declined_run):
    html = auditor_client.get(tab(project, declined_run, "tools")).content.decode()
    refused = re.findall(r'<li class="step refused">(.*?)</li>', html, re.S)
    assert refused
    # The deny, and the ask its run reported declined (omar's verdict row closed it).
    assert all("outcome: deny" in step or "/asks/" in step for step in refused)
    assert any("/asks/" in step for step in refused)


def test_verdicts_tab_groups_decisions_by_moment_with_their_why(auditor_client, project, declined_run):
    html = auditor_client.get(tab(project, declined_run, "verdicts")).content.decode()
    assert html.count('class="decision-row"') == 11
    assert "<h3>before-tool</h3>" in html
    assert "frozen-accounts" in html


def test_refusals_tab_links_each_refusal_to_its_trace(auditor_client, project, declined_run):
    html = auditor_client.get(tab(project, declined_run, "refusals")).content.decode()
    assert "/refusals/" in html


def test_a_tab_asked_by_htmx_is_only_the_panel(auditor_client, project, declined_run):
    response = auditor_client.get(
        tab(project, declined_run, "verdicts"), headers={"HX-Request": "true", "HX-Target": "run-tabs"}
    )
    assert b"<html" not in response.content
    assert b'class="decision-row"' in response.content


def test_an_unknown_tab_is_404(auditor_client, project, declined_run):
    assert auditor_client.get(tab(project, declined_run, "secrets")).status_code == 404


def test_tree_groups_events_by_path_and_iteration(auditor_client, project, declined_run):
    html = auditor_client.get(tab(project, declined_run, "tree")).content.decode()
    assert "<strong>Agent:agent</strong>" in html
    assert "sf-system-prompt" in html
    assert "iteration 1" in html
    counts = [int(n) for n in re.findall(r'class="tree-leaf">.*?<span class="muted">(\d+) events?', html, re.S)]
    assert sum(counts) == 71


def test_event_drawer_shows_payload_meta_and_hashes(auditor_client, project, declined_run):
    record = RunEvent.objects.get(run__run_id=declined_run, seq=3)
    url = f"/projects/{project.slug}/runs/{declined_run}/events/{record.position}/"
    partial = auditor_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in partial
    assert bytes(record.hash).hex() in partial
    assert "runtimeStageId" in partial
    assert "<html" in auditor_client.get(url).content.decode()  # without JavaScript: a page of its own


def test_event_drawer_for_a_missing_record_is_404(auditor_client, project, declined_run):
    assert auditor_client.get(f"/projects/{project.slug}/runs/{declined_run}/events/9999/").status_code == 404


def test_resumed_run_links_to_the_run_it_resumes_and_back(auditor_client, agent_client, project):
    events = fixture_events("b-middleware/events-approved.json")
    agent_client.ingest(events)
    paused, resumed = "run-1796043009084-1", "run-1796043009518-2"
    html = auditor_client.get(f"/projects/{project.slug}/runs/{resumed}/").content.decode()
    assert "Resumes" in html
    assert f"/runs/{paused}/" in html
    html = auditor_client.get(f"/projects/{project.slug}/runs/{paused}/").content.decode()
    assert "Resumed by" in html
    assert f"/runs/{resumed}/" in html


def test_cost_is_shown_when_the_agent_reported_it(auditor_client, agent_client, project):
    meta = {"runId": "run-cost", "wallClockMs": 1, "runOffsetMs": 0}
    ticks = [
        {
            "type": "agentfootprint.cost.tick",
            "seq": i,
            "meta": meta,
            "payload": {
                "scope": "iteration",
                "model": "m",
                "tokensInput": 1,
                "tokensOutput": 1,
                "estimatedUsd": 0.01,
                "cumulative": {"tokensInput": i, "tokensOutput": i, "estimatedUsd": usd},
            },
        }
        for i, usd in enumerate([0.01, 0.0125])
    ]
    agent_client.ingest(ticks)
    html = auditor_client.get(f"/projects/{project.slug}/runs/run-cost/").content.decode()
    assert "$0.0125" in html


def test_integrity_check_reports_a_verified_chain(auditor_client, project, declined_run):
    response = auditor_client.post(
        f"/projects/{project.slug}/runs/{declined_run}/integrity/", headers={"HX-Request": "true"}
    )
    assert b"<html" not in response.content
    assert b'id="integrity"' in response.content
    assert b"verified: 71 records" in response.content
    assert b"verified: 71 records" in auditor_client.get(f"/projects/{project.slug}/runs/{declined_run}/").content


def test_integrity_check_names_the_edited_record(auditor_client, project, declined_run):
    row = RunEvent.objects.filter(run__run_id=declined_run, seq=16).get()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_runevent SET body = replace(body, 'ACC-200', 'ACC-666') WHERE run_id = %s AND position = %s",
            row.pk,
        )
    response = auditor_client.post(f"/projects/{project.slug}/runs/{declined_run}/integrity/", follow=True)
    html = response.content.decode()
    assert f"broken at record {row.position}" in html
    assert "hash mismatch" in html


def test_integrity_check_is_404_for_an_outsider(outsider_client, project, declined_run):
    url = f"/projects/{project.slug}/runs/{declined_run}/integrity/"
    assert outsider_client.get(url).status_code == 404
    assert outsider_client.post(url).status_code == 404
    assert not IntegrityCheck.objects.exists()


def test_a_long_chain_is_checked_by_the_worker_and_shows_progress(auditor_client, project, declined_run, settings):
    """Queued when longer than the inline limit; the worker's pass (run here in-process, as the
    task does) fills in progress and the verdict that the polling panel then shows."""
    settings.FOOTPRINT_INLINE_VERIFY_MAX_RECORDS = 10
    url = f"/projects/{project.slug}/runs/{declined_run}/integrity/"
    # The test's transaction never commits, so the queued task is not sent; the worker's smoke
    # test sends it for real.
    html = auditor_client.post(url, headers={"HX-Request": "true"}).content.decode()
    assert "checking: 0 of 71 records" in html
    assert 'hx-trigger="every 1s"' in html
    check = IntegrityCheck.objects.get()
    integrity_check_run(check_id=check.pk)
    html = auditor_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "verified: 71 records" in html
    assert "every 1s" not in html


def test_otlp_run_page_shows_each_span_beside_its_events(agent_client, auditor_client, project):
    from tests.conftest import DATA

    raw = (DATA / "g-otel/otlp-traces.json").read_bytes()
    assert agent_client.post("/v1/traces", raw, content_type="application/json").status_code == 200
    run = project.runs.get(source="otlp")
    html = auditor_client.get(tab(project, run.run_id, "spans")).content.decode()
    assert html.count('class="span-row"') == 12
    assert "gen_ai.operation.name" in html
    assert "seq 0" in html
