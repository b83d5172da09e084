import pytest

from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db


def test_ingest_fixture_run_and_verify(agent_client):
    response = agent_client.ingest(fixture_events("a-run-recording/events.json"))
    assert response.status_code == 200
    (receipt,) = response.json()["runs"]
    assert receipt["accepted"] == 76
    verdict = agent_client.get(f"/api/v1/runs/{receipt['runId']}/verify").json()
    assert verdict == {"valid": True, "recordsChecked": 76}
