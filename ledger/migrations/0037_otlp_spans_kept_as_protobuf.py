"""Each OTLP span's verbatim copy kept protobuf-encoded (`protobuf`, bytea) instead of as OTLP/JSON
(`raw`, jsonb): `OtlpSpan.raw` reads it as OTLP/JSON now. Writing the JSON copy was a third of
decoding a request and its jsonb a third of PostgreSQL's time storing the span rows.

The spans stored before keep their OTLP/JSON copy (the `raw` column, `OtlpSpan.stored_json`,
which becomes nullable) and no `protobuf`: nothing is rewritten, so the migration takes no longer
on a table of millions of spans than on an empty one, and the version before goes on storing
spans (into `raw`) until the new one serves. Going back converts the spans stored since into
OTLP/JSON before `protobuf` goes.
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


def protobuf_to_json(apps: Any, schema_editor: Any) -> None:
    """The spans stored since (protobuf only) get their OTLP/JSON copy back, a batch at a time."""
    OtlpSpan = apps.get_model("ledger", "OtlpSpan")
    last = 0
    while True:
        batch = list(
            OtlpSpan.objects.filter(pk__gt=last, protobuf__isnull=False).order_by("pk").only("pk", "protobuf")[:BATCH]
        )
        if not batch:
            return
        for span in batch:
            span.stored_json = _as_json(bytes(span.protobuf))
        OtlpSpan.objects.bulk_update(batch, ["stored_json"])
        last = batch[-1].pk


class Migration(migrations.Migration):
    dependencies = [("ledger", "0036_partition_the_large_tables_by_month")]

    operations = [
        # Nullable: the spans stored from now on have no OTLP/JSON copy. Dropping NOT NULL reads
        # and rewrites nothing.
        migrations.AlterField(
            model_name="otlpspan",
            name="raw",
            field=models.JSONField(decoder=footprint_site.lib.jsonb.JsonbDecoder, null=True, db_column="raw"),
        ),
        # The same column under the name that says what it holds now (no change in the database).
        migrations.RenameField(model_name="otlpspan", old_name="raw", new_name="stored_json"),
        migrations.AddField(model_name="otlpspan", name="protobuf", field=models.BinaryField(null=True)),
        migrations.RunPython(migrations.RunPython.noop, protobuf_to_json),
    ]
