"""OTLP spans as the rows COPY writes: their verbatim copy as json_format would write it, text
and jsonb without U+0000, and no span left behind by whatever removes its run or project (the
database no longer checks the span's project)."""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from ledger.models import OtlpSpan, Run
from ledger.otlp.wire import decode_spans, message_json
from ledger.retention import services as retention
from tenancy.services import UNNAMED
from tests.conftest import DATA

pytestmark = pytest.mark.django_db

URL = "/v1/traces"
PROTOBUF = "application/x-protobuf"
FIXTURE_TRACE = "4c5b3d1ba1045b2bf42e5832fb71db5c"


def _every_kind_of_span() -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    scope_spans.scope.name = "agentfootprint"
    span = scope_spans.spans.add(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        parent_span_id=b"\x03" * 8,
        trace_state="vendor=1",
        flags=257,
        kind=3,
        name="execute_tool \x00lookup",
        start_time_unix_nano=2**63 - 1,
        end_time_unix_nano=1,
        dropped_attributes_count=4,
    )
    span.status.code = 2
    span.status.message = "boom"
    values = [
        AnyValue(string_value=""),
        AnyValue(string_value="a\x00b"),
        AnyValue(bool_value=False),
        AnyValue(int_value=-(2**63)),
        AnyValue(double_value=float("nan")),
        AnyValue(double_value=float("-inf")),
        AnyValue(double_value=0.1),
        AnyValue(bytes_value=b"\xff\x00"),
        AnyValue(),
        AnyValue(array_value={}),
        AnyValue(array_value={"values": [AnyValue(string_value="s"), AnyValue(int_value=2)]}),
        AnyValue(kvlist_value={"values": [KeyValue(key="k", value=AnyValue(double_value=1.5))]}),
    ]
    span.attributes.extend(KeyValue(key=f"attribute.{n}", value=value) for n, value in enumerate(values))
    event = span.events.add(time_unix_nano=7, name="agentfootprint.error.fatal")
    event.attributes.append(KeyValue(key="agentfootprint.error.stage", value=AnyValue(string_value="tool")))
    link = span.links.add(trace_id=b"\x04" * 16, span_id=b"\x05" * 8, flags=1)
    link.attributes.append(KeyValue(key="link.kind", value=AnyValue(string_value="follows")))
    scope_spans.spans.add(trace_id=b"\x01" * 16, span_id=b"\x06" * 8).status.SetInParent()  # an empty status
    return request


def test_a_spans_verbatim_copy_is_what_json_format_writes() -> None:
    request = ExportTraceServiceRequest.FromString(_every_kind_of_span().SerializeToString())
    for span in request.resource_spans[0].scope_spans[0].spans:
        expected = json_format.MessageToDict(span, use_integers_for_enums=True)
        assert json.dumps(message_json(span), sort_keys=True) == json.dumps(expected, sort_keys=True)
    scope = request.resource_spans[0].scope_spans[0].scope
    assert message_json(scope) == json_format.MessageToDict(scope)


def test_every_kind_of_value_is_stored_without_nul_and_read_back(agent_client: Any, project: Any) -> None:
    body = _every_kind_of_span().SerializeToString()
    response = agent_client.post(URL, body, content_type=PROTOBUF)

    assert response.status_code == 200
    row = OtlpSpan.objects.get(project=project, span_id="02" * 8)
    (sent, _) = decode_spans(body, as_json=False)
    assert row.name == "execute_tool \ufffdlookup"
    assert (row.kind, row.status_code, row.status_message) == (3, 2, "boom")
    assert (row.start_unix_nano, row.end_unix_nano, row.parent_span_id) == (2**63 - 1, 1, "03" * 8)
    assert row.attributes["attribute.1"] == "a\ufffdb"
    assert row.attributes["attribute.4"] == "nan"
    assert row.raw["name"] == "execute_tool \ufffdlookup"
    assert row.raw["links"][0]["traceId"] == "04" * 16  # hex, as OTLP/JSON writes ids
    assert row.events == sent.events
    assert row.scope == {"name": "agentfootprint"}
    # Sent again, the span is recognised as stored (its copy read back equals the one sent).
    again = agent_client.post(URL, body, content_type=PROTOBUF)
    assert again.status_code == 200
    assert again.content == b""
    assert OtlpSpan.objects.filter(project=project).count() == 2


def _post_fixture(agent_client: Any) -> None:
    body = (DATA / "g-otel/otlp-traces.json").read_bytes()
    assert agent_client.post(URL, body, content_type="application/json").status_code == 200


def test_a_run_removed_by_retention_takes_its_spans(
    agent_client: Any, other_agent_client: Any, project: Any, settings: Any, tmp_path: Path
) -> None:
    settings.ARCHIVE_URL = (tmp_path / "archive").as_uri()
    _post_fixture(agent_client)
    _post_fixture(other_agent_client)  # the same trace in another project stays
    Run.objects.filter(project=project).update(last_event_at=timezone.now() - timedelta(days=40))
    retention.run_retention_set(project=project, keep_days=30, actor=UNNAMED)

    assert retention.runs_retention_pass().removed == 1

    assert not OtlpSpan.objects.filter(project=project).exists()
    assert OtlpSpan.objects.filter(trace_id=FIXTURE_TRACE).count() == 12


def test_a_deleted_project_takes_its_spans(agent_client: Any, other_agent_client: Any, project: Any) -> None:
    _post_fixture(agent_client)
    _post_fixture(other_agent_client)

    OtlpSpan.objects.filter(project=project).first().project.delete()  # type: ignore[union-attr]

    assert OtlpSpan.objects.filter(project_id=project.pk).count() == 0
    assert OtlpSpan.objects.count() == 12
