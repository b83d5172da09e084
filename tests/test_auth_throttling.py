"""Failed key checks are throttled per client address; nothing secret reaches the logs."""

import logging

import pytest

from footprint_site import auth
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_repeated_bad_keys_are_answered_429_with_retry_after(agent_client):
    guesser = ApiClient("afk_guess_guess")
    for _ in range(auth.MAX_FAILURES_PER_WINDOW):
        assert guesser.get("/api/v1/runs").status_code == 401
    throttled = guesser.get("/api/v1/runs")
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "ERR_RATE_LIMITED"
    assert int(throttled["Retry-After"]) > 0
    assert guesser.post("/v1/traces", b"{}", content_type="application/json").status_code == 429


def test_a_valid_key_still_works_from_a_throttled_address(agent_client):
    agent_client.get("/api/v1/runs")  # verified once: remembered for a few seconds
    guesser = ApiClient("afk_guess_guess")
    for _ in range(auth.MAX_FAILURES_PER_WINDOW + 1):
        guesser.get("/api/v1/runs")
    assert agent_client.get("/api/v1/runs").status_code == 200


def test_logs_carry_no_key_payload_or_scope(agent_client, caplog):
    secret_payload = "PAYLOAD-MARKER-7731"
    scope_marker = "SCOPE-MARKER-4411"
    from artifacts.scopes import scope_header

    caplog.set_level(logging.DEBUG)
    agent_client.ingest(
        [{"seq": 0, "type": "agentfootprint.x", "payload": {"s": secret_payload}, "meta": {"runId": "log-run"}}]
    )
    agent_client.ingest([{"seq": "bad", "type": "t", "payload": {"s": secret_payload}, "meta": {}}])
    agent_client.post("/api/v1/events", b"{not json " + secret_payload.encode(), content_type="application/json")
    ApiClient("afk_wrong_" + secret_payload).get("/api/v1/runs")
    agent_client.get("/api/v1/artifacts", HTTP_AF_SCOPE=scope_header({"tenant": scope_marker, "conversationId": "c"}))
    agent_client.get("/api/v1/artifacts", HTTP_AF_SCOPE="not-a-scope-" + scope_marker)
    key = agent_client.defaults["HTTP_AUTHORIZATION"].split()[-1]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (secret_payload, scope_marker, key):
        assert secret not in logged
