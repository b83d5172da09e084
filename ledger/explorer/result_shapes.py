"""The framework's typed tool-result shapes, recognised by their markers when a page is read.

An absence (`absent(…)`: `af_absent: true` with a non-empty `checked`), a coverage ledger
(`coverage(result, …)`: an `af_coverage` object beside `result`) and a semantic envelope
(`semantic(…)`: `af_semantics: true`) each say what the answer covered and what it did not. That is
often the context behind a wrong answer, so the run page and the refusal trace say it in words.

The model reads a semantic envelope without its marker (the `stream.tool_end` result is that
projection); the full envelope rides `tools.semantics_declared.semantics`, so that is where it is
recognised. Markers and notes come from the framework's published canonical-notes file. Never on
the ingestion path: events are stored as sent and read here.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ledger.framework.canonical_notes import canonical_notes
from ledger.models import Run, RunEvent

SEMANTICS_EVENT = "agentfootprint.tools.semantics_declared"
ITEMS_SHOWN = 20  # per list: a tool may list many grounds, a page line should not run forever


@dataclass(frozen=True)
class Ground:
    """One coverage item: a bare string, or `{what, why?}` (`short`/`kind` are record-only)."""

    what: str
    why: str | None = None

    def __str__(self) -> str:
        return f"{self.what} — {self.why}" if self.why else self.what


@dataclass
class ResultShape:
    """One recognised shape: `shape` is 'absence', 'coverage' or 'semantics'."""

    shape: str
    marker: str
    canonical_note: str
    note: str | None = None
    looked_for: str | None = None
    checked: list[Ground] = field(default_factory=list)
    not_checked: list[Ground] = field(default_factory=list)
    cannot_cover: list[Ground] = field(default_factory=list)
    not_covered: list[str] = field(default_factory=list)
    grain: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None

    @property
    def note_is_canonical(self) -> bool:
        """False when the result carries another release's wording (or none)."""
        return self.note == self.canonical_note

    @property
    def summary(self) -> str:
        """'this answer covered only …; not checked …; cannot cover …', with the lists it declared."""
        parts = []
        if self.looked_for:
            parts.append(f"looked for {self.looked_for} and found nothing")
        if self.checked:
            parts.append("this answer covered only " + _listed(self.checked))
        if self.not_checked:
            parts.append("not checked " + _listed(self.not_checked))
        if self.cannot_cover:
            parts.append("cannot cover " + _listed(self.cannot_cover))
        if self.not_covered and not (self.not_checked or self.cannot_cover):
            parts.append("not covered " + "; ".join(self.not_covered[:ITEMS_SHOWN]))
        return "; ".join(parts)

    @property
    def caveats(self) -> list[str]:
        """A semantic envelope's caveats that travel with its numbers: grain and provenance."""
        lines = []
        if self.grain:
            stated = [key for key in ("interval", "aggregation", "collapsed") if key in self.grain]
            said = [f"{key} {_plain(self.grain[key])}" for key in stated]
            if "is_counter" in self.grain:
                said.append("a counter" if self.grain["is_counter"] is True else "not a counter")
            lines.append("grain: " + ", ".join(said))
        if self.provenance:
            p = self.provenance
            said = []
            if "measured_at" in p:
                said.append(f"measured at {_plain(p['measured_at'])}")
            if "age_seconds" in p:
                said.append(f"{_plain(p['age_seconds'])} seconds old")
            if "source" in p:
                said.append(f"from {_plain(p['source'])}")
            if "source_export_date" in p:
                said.append(f"export of {_plain(p['source_export_date'])}")
            lines.append("provenance: " + ", ".join(said))
        return lines


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _listed(grounds: list[Ground]) -> str:
    shown = ", ".join(str(g) for g in grounds[:ITEMS_SHOWN])
    more = len(grounds) - ITEMS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _grounds(items: Any) -> list[Ground]:
    if not isinstance(items, list):
        return []
    grounds = []
    for item in items:
        if isinstance(item, str) and item.strip():
            grounds.append(Ground(item))
        elif isinstance(item, dict) and isinstance(item.get("what"), str) and item["what"].strip():
            why = item.get("why")
            grounds.append(Ground(item["what"], why if isinstance(why, str) and why.strip() else None))
    return grounds


def _lists(into: ResultShape, source: dict[str, Any]) -> ResultShape:
    into.checked = _grounds(source.get("checked"))
    into.not_checked = _grounds(source.get("not_checked"))
    into.cannot_cover = _grounds(source.get("cannot_cover"))
    note = source.get("note")
    into.note = note if isinstance(note, str) else None
    return into


def read_absence(value: Any) -> ResultShape | None:
    """The framework's `readAbsence`: a plain object whose marker is exactly true and whose
    `checked` is a non-empty list."""
    notes = canonical_notes()
    if not isinstance(value, dict) or value.get(notes.absence_marker) is not True:
        return None
    if not isinstance(value.get("checked"), list) or not value["checked"]:
        return None
    shape = _lists(ResultShape("absence", notes.absence_marker, notes.absence_note), value)
    looked_for = value.get("looked_for")
    shape.looked_for = looked_for if isinstance(looked_for, str) else None
    return shape


def read_coverage(value: Any) -> list[ResultShape]:
    """A coverage ledger `{af_coverage: {…}, result}`, and an absence it wraps (`coverage(absent(…))`)."""
    notes = canonical_notes()
    if not isinstance(value, dict) or not isinstance(value.get(notes.coverage_marker), dict) or "result" not in value:
        return []
    ledger = _lists(ResultShape("coverage", notes.coverage_marker, notes.coverage_note), value[notes.coverage_marker])
    if not (ledger.checked or ledger.not_checked or ledger.cannot_cover):
        return []  # a ledger that declares no boundary is no ledger (the framework refuses to mint one)
    inner = read_absence(value["result"])
    return [ledger] + ([inner] if inner is not None else [])


def read_semantics(value: Any) -> ResultShape | None:
    """A semantic envelope: marker exactly true and some data (series, facts, edges) or a question."""
    notes = canonical_notes()
    if not isinstance(value, dict) or value.get(notes.semantics_marker) is not True:
        return None
    if not any(isinstance(value.get(key), list) and value[key] for key in ("series", "facts", "edges")) and not (
        isinstance(value.get("clarify"), dict)
    ):
        return None
    coverage = value.get("coverage")
    shape = _lists(ResultShape("semantics", notes.semantics_marker, notes.semantics_note), {})
    if isinstance(coverage, dict):
        shape = _lists(shape, coverage)
    note = value.get("note")
    shape.note = note if isinstance(note, str) else None
    shape.not_covered = [line for line in value.get("not_covered") or [] if isinstance(line, str)]
    shape.grain = value["grain"] if isinstance(value.get("grain"), dict) else None
    shape.provenance = value["provenance"] if isinstance(value.get("provenance"), dict) else None
    return shape


def shapes_of_result(result: Any) -> list[ResultShape]:
    """The shapes a tool call's result declares (a semantic envelope is never in the result)."""
    absence = read_absence(result)
    if absence is not None:
        return [absence]
    return read_coverage(result)


def _payload(event: RunEvent) -> Any:
    doc = event.doc if isinstance(event.doc, dict) else orjson.loads(event.body)
    return doc.get("payload") if isinstance(doc, dict) else None


def result_shapes_of_calls(*, run: Run, calls: Iterable[Any]) -> dict[str, list[ResultShape]]:
    """Each call's recognised shapes by call id: from its result, and from the semantic envelopes
    its `tools.semantics_declared` events carry (one query for the page's calls)."""
    calls = list(calls)
    found: dict[str, list[ResultShape]] = {call.tool_call_id: shapes_of_result(call.result) for call in calls}
    ids = [call.tool_call_id for call in calls]
    if not ids:
        return found
    events = (
        RunEvent.objects.of_run(run)
        .filter(tool_call_id__in=ids, type=SEMANTICS_EVENT)
        .only("tool_call_id", "doc", "body")
    )
    for event in events.order_by("seq"):
        payload = _payload(event)
        shape = read_semantics(payload.get("semantics")) if isinstance(payload, dict) else None
        if shape is not None and event.tool_call_id is not None:
            found.setdefault(event.tool_call_id, []).append(shape)
    return found
