"""OtlpSpan rows in PostgreSQL's binary COPY format, encoded here as the native path encodes its
events (ledger.ingest.services.EventRowsWriter): a 512-span request was 512 ORM objects, each
field prepared by Django and quoted by psycopg into one long INSERT, which cost two thirds of
the request. COPY needs no conflict handling: the spans written are those not stored yet, read
under the traces' locks (ledger.otlp.services).
"""

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from ledger.ingest.envelopes import replace_nul
from ledger.otlp.wire import Span

SPAN_COLUMNS: Final = (
    "project_id, trace_id, span_id, parent_span_id, name, kind, start_unix_nano, end_unix_nano, status_code,"
    " status_message, attributes, events, resource_attributes, scope, protobuf, span_number, first_seq, event_count"
)
SPANS_COPY: Final = f"COPY ledger_otlpspan ({SPAN_COLUMNS}) FROM STDIN (FORMAT BINARY)"

COPY_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # then flags and header-extension length, 0
COPY_TRAILER: Final = b"\xff\xff"
SPAN_FIELDS: Final = 18
# A block is sent once it holds this much: under psycopg's largest single write (128 KiB).
COPY_BLOCK_BYTES: Final = 120 * 1024
JSONB_VERSION: Final = b"\x01"
ESCAPED_NUL: Final = b"\\u0000"

_pack_row_head: Final = struct.Struct(">hiq").pack  # field count, project_id with its length
_pack_length: Final = struct.Struct(">i").pack
# kind, start and end nanos, status code: each with its length.
_pack_span_numbers: Final = struct.Struct(">ihiqiqih").pack
_pack_jsonb_length: Final = struct.Struct(">ib").pack  # length, then jsonb's binary format version (1)
_pack_counters: Final = struct.Struct(">iiiiii").pack  # span_number, first_seq, event_count with lengths


def _text(value: str) -> bytes:
    # Text columns cannot hold U+0000 either: U+FFFD stands in for it, as in the jsonb columns.
    encoded = (value.replace("\x00", "\ufffd") if "\x00" in value else value).encode()
    return _pack_length(len(encoded)) + encoded


def jsonb_text(value: Any) -> bytes:
    """`value` as JSON text jsonb accepts: orjson's, unless it escaped a U+0000 (jsonb refuses
    it), then with U+FFFD in its place. A `\\\\u0000` in a string (a backslash before `u0000`)
    matches too: it is written the same then, only a little slower."""
    text = orjson.dumps(value)
    if ESCAPED_NUL in text:
        text = orjson.dumps(replace_nul(value))
    return text


def _jsonb(text: bytes) -> bytes:
    return _pack_jsonb_length(len(text) + 1, 1) + text


class SpanRowsWriter:
    """OtlpSpan rows in binary COPY format, handed to `write` (the open COPY's) a block at a time.

    A request's spans share their resource's attributes and their scope: each is written as JSON
    once per request, not once per span."""

    def __init__(self, write: Callable[[bytes], None], project_pk: int) -> None:
        self.write = write
        self.project_pk = project_pk
        self.parts: list[bytes] = [COPY_SIGNATURE]
        self.pending = 0
        self.shared: dict[int, tuple[Any, bytes]] = {}  # id(value) → (value, its jsonb field)

    def _shared_jsonb(self, value: Any) -> bytes:
        # Kept with the value, so that its id cannot be reused by another object meanwhile.
        known = self.shared.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        field = _jsonb(jsonb_text(value))
        self.shared[id(value)] = (value, field)
        return field

    def append(self, span: Span, span_number: int, first_seq: int, event_count: int) -> None:
        protobuf = _pack_length(len(span.protobuf)) + span.protobuf
        attributes = _jsonb(jsonb_text(span.attributes))
        events = _jsonb(jsonb_text(span.events)) if span.events else b"\x00\x00\x00\x03\x01[]"
        parts = (
            _pack_row_head(SPAN_FIELDS, 8, self.project_pk),
            _text(span.trace_id),
            _text(span.span_id),
            _text(span.parent_span_id),
            _text(span.name),
            _pack_span_numbers(2, span.kind, 8, span.start_unix_nano, 8, span.end_unix_nano, 2, span.status_code),
            _text(span.status_message),
            attributes,
            events,
            self._shared_jsonb(span.resource_attributes),
            self._shared_jsonb(span.scope),
            protobuf,
            _pack_counters(4, span_number, 4, first_seq, 4, event_count),
        )
        self.parts += parts
        self.pending += len(protobuf) + len(attributes) + len(events) + 150
        if self.pending >= COPY_BLOCK_BYTES:
            self.write(b"".join(self.parts))
            self.parts, self.pending = [], 0

    def finish(self) -> None:
        self.parts.append(COPY_TRAILER)
        self.write(b"".join(self.parts))
