"""The run page's tabs and its on-demand integrity check."""

import pytest
from django.db import connection

from ledger.models import RunEvent
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def declined_run(agent_client) -> str:
    events = fixture_events("b-middleware/events-declined.json")
    agent_client.ingest(events)
    return events[0]["meta"]["runId"]


def test_run_page_shows_tool_calls_verdicts_and_refusals(auditor_client, project, declined_run):
    html = auditor_client.get(f"/projects/{project.slug}/runs/{declined_run}/").content.decode()
    assert html.count('class="tool-call-row"') == 3
    assert html.count('class="decision-row"') == 11
    assert "frozen-accounts" in html
    assert "/refusals/" in html


def test_integrity_check_reports_a_verified_chain(auditor_client, project, declined_run):
    response = auditor_client.get(
        f"/projects/{project.slug}/runs/{declined_run}/integrity/", headers={"HX-Request": "true"}
    )
    assert b"<html" not in response.content
    assert b'id="integrity"' in response.content
    assert b"verified: 71 records" in response.content


def test_integrity_check_names_the_edited_record(auditor_client, project, declined_run):
    row = RunEvent.objects.filter(run__run_id=declined_run, seq=16).get()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_runevent SET body = replace(body, 'ACC-200', 'ACC-666') WHERE id = %s", [row.pk])
    html = auditor_client.get(f"/projects/{project.slug}/runs/{declined_run}/integrity/").content.decode()
    assert f"broken at record {row.position}" in html
    assert "hash mismatch" in html


def test_integrity_check_is_404_for_an_outsider(outsider_client, project, declined_run):
    assert outsider_client.get(f"/projects/{project.slug}/runs/{declined_run}/integrity/").status_code == 404


def test_otlp_run_page_shows_each_span_beside_its_events(agent_client, auditor_client, project):
    from tests.conftest import DATA

    raw = (DATA / "g-otel/otlp-traces.json").read_bytes()
    assert agent_client.post("/v1/traces", raw, content_type="application/json").status_code == 200
    run = project.runs.get(source="otlp")
    html = auditor_client.get(f"/projects/{project.slug}/runs/{run.run_id}/").content.decode()
    assert html.count('class="span-row"') == 12
    assert "gen_ai.operation.name" in html
    assert "seq 0" in html
