"""Each OTLP span's verbatim copy kept protobuf-encoded (`protobuf`, bytea) instead of as OTLP/JSON
(`raw`, jsonb): `OtlpSpan.raw` reads it as OTLP/JSON now. Writing the JSON copy was a third of
decoding a request and its jsonb a third of PostgreSQL's time storing the span rows.

The stored copies are converted row by row, both ways; the table is rewritten once. OTLP requests
served meanwhile by the version before (which writes `raw`) fail once `raw` is gone: run it with
OTLP ingestion stopped, as it takes as long as rewriting the span table.
"""

import base64
from typing import Any

from django.db import migrations, models
from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import Span

import footprint_site.lib.jsonb

BATCH = 1000
IDS = ("traceId", "spanId", "parentSpanId")


def _holders(document: dict[str, Any]) -> list[dict[str, Any]]:
    links = document.get("links")
    return [document, *(link for link in (links if isinstance(links, list) else []) if isinstance(link, dict))]


def _as_protobuf(raw: dict[str, Any]) -> bytes:
    """OTLP/JSON (hex ids) into the protobuf message it decodes to (ProtoJSON: base64 ids)."""
    for holder in _holders(raw):
        for key in IDS:
            if isinstance(holder.get(key), str):
                holder[key] = base64.b64encode(bytes.fromhex(holder[key])).decode()
    return json_format.ParseDict(raw, Span(), ignore_unknown_fields=True).SerializeToString()


def _as_json(protobuf: bytes) -> dict[str, Any]:
    document = json_format.MessageToDict(Span.FromString(protobuf), use_integers_for_enums=True)
    for holder in _holders(document):
        for key in IDS:
            if key in holder:
                holder[key] = base64.b64decode(holder[key]).hex()
    return _without_nul(document)


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    return value


def _convert(apps: Any, source: str, target: str, convert: Any) -> None:
    OtlpSpan = apps.get_model("ledger", "OtlpSpan")
    last = 0
    while True:
        batch = list(OtlpSpan.objects.filter(pk__gt=last).order_by("pk").only("pk", source)[:BATCH])
        if not batch:
            return
        for span in batch:
            setattr(span, target, convert(getattr(span, source)))
        OtlpSpan.objects.bulk_update(batch, [target])
        last = batch[-1].pk


def raw_to_protobuf(apps: Any, schema_editor: Any) -> None:
    _convert(apps, "raw", "protobuf", _as_protobuf)


def protobuf_to_raw(apps: Any, schema_editor: Any) -> None:
    _convert(apps, "protobuf", "raw", lambda protobuf: _as_json(bytes(protobuf)))


class Migration(migrations.Migration):
    dependencies = [("ledger", "0036_partition_the_large_tables_by_month")]

    operations = [
        migrations.AddField(model_name="otlpspan", name="protobuf", field=models.BinaryField(null=True)),
        # Nullable before it goes, so that going back adds it to a table that has rows.
        migrations.AlterField(
            model_name="otlpspan",
            name="raw",
            field=models.JSONField(decoder=footprint_site.lib.jsonb.JsonbDecoder, null=True),
        ),
        migrations.RunPython(raw_to_protobuf, protobuf_to_raw),
        migrations.RemoveField(model_name="otlpspan", name="raw"),
        migrations.AlterField(model_name="otlpspan", name="protobuf", field=models.BinaryField()),
    ]
