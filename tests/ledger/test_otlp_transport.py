"""How OpenTelemetry exporters send and read (OTLP/HTTP "Request", "Response", "Failures"): a
body streamed without a Content-Length, as the JavaScript exporter sends every export, is read
whole under the production server; every answer, the 503 of an unreachable database included,
is a google.rpc.Status in the request's own Content-Type."""

import gzip
import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError

from ledger.models import OtlpSpan, RunEvent
from ledger.otlp.wire import RpcStatus
from tenancy.services import agent_key_create
from tests.conftest import DATA
from tests.ledger.test_otlp import URL, _protobuf
from tests.servers import Gunicorn

FIXTURE = json.loads((DATA / "g-otel/otlp-traces.json").read_bytes())
SPANS = len(FIXTURE["resourceSpans"][0]["scopeSpans"][0]["spans"])
TRACE_ID = "4c5b3d1ba1045b2bf42e5832fb71db5c"


def _chunked_post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST with `Transfer-Encoding: chunked` and no Content-Length, as Node's http.request does
    when a stream is piped into it (the OpenTelemetry JS exporter's `compressAndSend`)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        chunks = [body[i : i + 1000] for i in range(0, len(body), 1000)]
        connection.request("POST", path, body=iter(chunks), headers=headers, encode_chunked=True)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_chunked_bodies_are_read_whole_under_the_production_server(tmp_path: Path, project: Any) -> None:
    """An OTLP export (protobuf, then gzip), a native batch, and a chunked body over the limit:
    the first three stored whole, the last refused 413, never an empty body answered 200."""
    _, secret = agent_key_create(project=project, scopes=["ingest"])
    auth = {"Authorization": f"Bearer {secret}"}
    exported = _protobuf(FIXTURE)
    events = {
        "events": [
            {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": "run-chunked"}}
        ]
    }
    server = Gunicorn(tmp_path / "gunicorn.log", workers=1, env={"FOOTPRINT_MAX_REQUEST_BYTES": "200000"})
    try:
        server.start()
        plain = _chunked_post(server.port, URL, exported, {**auth, "Content-Type": "application/x-protobuf"})
        zipped = _chunked_post(
            server.port,
            URL,
            gzip.compress(exported),
            {**auth, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )
        native = _chunked_post(
            server.port, "/api/v1/events", json.dumps(events).encode(), {**auth, "Content-Type": "application/json"}
        )
        too_big = _chunked_post(
            server.port, "/api/v1/events", b" " * 200_001, {**auth, "Content-Type": "application/json"}
        )
    finally:
        server.stop()

    assert plain[0] == 200, plain
    assert zipped[0] == 200, zipped
    assert OtlpSpan.objects.filter(project=project, trace_id=TRACE_ID).count() == SPANS
    assert native[0] == 200, native
    assert RunEvent.objects.filter(run__run_id="run-chunked").count() == 1
    assert too_big[0] == 413, too_big
    assert b"200000 bytes" in too_big[1]


@pytest.mark.django_db
def test_a_chunked_body_a_server_cannot_end_is_411_not_an_empty_body(agent_client: Any) -> None:
    """Without WSGI's `wsgi.input_terminated` (runserver, the test client), the body's end is
    unknown: a sentence asking for a Content-Length, and nothing stored."""
    response = agent_client.post(
        "/api/v1/events",
        json.dumps({"events": []}),
        content_type="application/json",
        headers={"Transfer-Encoding": "chunked"},
        CONTENT_LENGTH="",
    )

    assert response.status_code == 411, response.content
    assert "Content-Length" in response.json()["error"]


def _rpc_status(body: bytes) -> tuple[int, str]:
    status = RpcStatus()
    status.ParseFromString(body)
    return status.code, status.message


def _post(client: Any, body: bytes | str, content_type: str) -> Any:
    client.raise_request_exception = False
    return client.post(URL, body, content_type=content_type)


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["application/x-protobuf", "application/protobuf"])
def test_the_answer_has_the_requests_own_content_type(agent_client: Any, content_type: str) -> None:
    """ "The server MUST use the same Content-Type in the response as it received in the request."""
    response = _post(agent_client, _protobuf(FIXTURE), content_type)

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == content_type


@pytest.mark.django_db
def test_an_unreachable_database_is_a_503_status_in_the_exporters_encoding(agent_client: Any, monkeypatch) -> None:
    """ "The response body for all HTTP 4xx and HTTP 5xx responses MUST be a Protobuf-encoded
    Status message": UNAVAILABLE (14), with Retry-After, as the exporter retries it."""

    def unavailable(**_: Any) -> None:
        raise OperationalError("connection to server at 127.0.0.1 failed")

    monkeypatch.setattr("ledger.otlp.views.otlp_ingest", unavailable)

    response = _post(agent_client, _protobuf(FIXTURE), "application/x-protobuf")

    assert response.status_code == 503
    assert response.has_header("Retry-After")
    assert response["Content-Type"] == "application/x-protobuf"
    assert _rpc_status(response.content)[0] == 14


@pytest.mark.django_db
def test_a_query_holding_u0000_is_refused_with_a_status_too(agent_client: Any) -> None:
    agent_client.raise_request_exception = False
    response = agent_client.post(f"{URL}?x=%00", _protobuf(FIXTURE), content_type="application/x-protobuf")

    assert response.status_code == 422
    assert response["Content-Type"] == "application/x-protobuf"
    assert "U+0000" in _rpc_status(response.content)[1]
