"""Strict recognition of the framework's typed event envelope, `{seq, type, payload?, meta}`.

Pure functions (no database): they parse a request body, check every event and return either the
events ready to store or every problem found, each naming the event's index and field.
"""

from typing import Any, Final

import orjson

from footprint_site.exceptions import BodyTooLarge
from footprint_site.lib.ids import MAX_ID_LENGTH, RUN_ID_RULE, is_plain_id, is_run_id
from footprint_site.lib.jsonbody import MAX_DEPTH, json_holds_nul, parse_stream_json
from ledger.exceptions import BatchInvalid

ENVELOPE_KEYS: Final = frozenset({"seq", "type", "payload", "meta"})
MAX_SEQ: Final = 2**31 - 1
# Lists, not tuples: compiled, a loop over a list indexes it, while a constant tuple is boxed per loop.
IDENTITY_KEYS: Final = ["sessionId", "tenant", "principal"]
PATH_KEYS: Final = ["subflowPath", "compositionPath"]
# The server's own records in a chain (a person's decision, say) are typed `ledger.…`: an agent
# posting one could pass it off as the server's, so ingestion refuses the namespace.
SERVER_NAMESPACE: Final = "ledger."
# POST /v1/traces files each trace's spans under the run `otlp-<trace id>`, numbering its events
# itself: native events in such a run would collide with those numbers, so only OTLP may name one.
OTLP_RUN_PREFIX: Final = "otlp-"
OTLP_RUN_RULE: Final = (
    "meta.runId 'otlp-…' names the run of an OpenTelemetry trace, which only POST /v1/traces writes; "
    "give the agent's own run another id."
)
SERVER_NAMESPACE_RULE: Final = (
    "type 'ledger.…' is the server's own namespace (its records of decisions made here); "
    "an agent's events are typed by the framework, e.g. 'agentfootprint.stream.tool_start'."
)


class Event:
    """A checked event. `body` is the canonical text (sorted keys, no whitespace) that is hashed;
    `holds_nul` says whether it holds U+0000, which the queryable copies replace (jsonb cannot
    hold it).

    A plain class, not a dataclass: compiled, a dataclass is built by the interpreted `__init__`
    that `dataclasses` generates, and one Event is built per ingested event.
    """

    __slots__ = ("body", "has_payload", "holds_nul", "meta", "payload", "run_id", "seq", "type", "wall_clock_ms")

    def __init__(
        self,
        run_id: str,
        seq: int,
        type_: str,
        meta: dict[str, Any],
        payload: Any,
        has_payload: bool,
        body: bytes,
        holds_nul: bool,
        wall_clock_ms: int | None,
    ) -> None:
        self.run_id = run_id
        self.seq = seq
        self.type = type_
        self.meta = meta
        self.payload = payload
        self.has_payload = has_payload
        self.body = body
        self.holds_nul = holds_nul
        self.wall_clock_ms = wall_clock_ms


LAST_WALL_CLOCK_MS: Final = 253_402_300_800_000  # 10000-01-01T00:00:00Z: a time of day PostgreSQL can hold


def canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def replace_nul(value: Any) -> Any:
    """The value with every U+0000 replaced by U+FFFD (jsonb cannot store U+0000)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [replace_nul(v) for v in value]
    if isinstance(value, dict):
        return {replace_nul(k): replace_nul(v) for k, v in value.items()}
    return value


def _problem(index: int, field: str, message: str) -> dict[str, Any]:
    return {"index": index, "field": field, "message": message}


def _id_problem(index: int, key: str) -> dict[str, Any]:
    if key == "runId":
        return _problem(index, "meta.runId", RUN_ID_RULE)
    return _problem(
        index,
        f"meta.{key}",
        f"meta.{key} must be a non-empty string of at most {MAX_ID_LENGTH} characters, without U+0000.",
    )


def _checked_meta(index: int, meta: Any, from_otlp: bool) -> tuple[int | None, list[dict[str, Any]]]:
    """The whole milliseconds of `meta.wallClockMs` (None when absent), and what is wrong with meta."""
    if not isinstance(meta, dict):
        return None, [_problem(index, "meta", "meta must be an object carrying at least runId.")]
    problems = []
    if "runId" not in meta:
        problems.append(_problem(index, "meta.runId", "meta.runId is required: the run this event belongs to."))
    elif not is_run_id(meta["runId"]):
        problems.append(_id_problem(index, "runId"))
    elif not from_otlp and meta["runId"].startswith(OTLP_RUN_PREFIX):
        problems.append(_problem(index, "meta.runId", OTLP_RUN_RULE))
    for key in IDENTITY_KEYS:
        if key in meta and not is_plain_id(meta[key]):
            problems.append(_id_problem(index, key))
    wall = None
    if "wallClockMs" in meta:
        wall = wall_clock_ms_of(meta["wallClockMs"])
        if wall is None:
            message = "meta.wallClockMs must be a Unix time in milliseconds."
            problems.append(_problem(index, "meta.wallClockMs", message))
    for key in PATH_KEYS:
        if key in meta and not isinstance(meta[key], list):
            problems.append(_problem(index, f"meta.{key}", f"meta.{key} must be an array."))
    return wall, problems


def wall_clock_ms_of(value: Any) -> int | None:
    """Whole milliseconds of a valid `meta.wallClockMs`, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < LAST_WALL_CLOCK_MS else None
    if isinstance(value, float) and 0 <= value < LAST_WALL_CLOCK_MS:  # NaN fails both comparisons
        return int(value)
    return None


def check_event(
    index: int, raw: Any, *, may_hold_nul: bool = True, from_otlp: bool = False
) -> tuple[Event | None, list[dict[str, Any]]]:
    """Check one envelope; return the event, or the list of what is wrong with it.

    Runs once per ingested event (it is on the ingestion hot path), so each field is read once.
    `may_hold_nul=False` when the JSON text the event was read from holds no U+0000: then its
    canonical text cannot either, and is not searched. `from_otlp`: mapped from OTLP spans, the
    one source that may name a run `otlp-…`.
    """
    if not isinstance(raw, dict):
        return None, [_problem(index, "", "Each event must be a JSON object {seq, type, payload, meta}.")]
    problems = []
    # Counting the four known keys is cheaper than comparing key sets, and this runs per event.
    known = ("seq" in raw) + ("type" in raw) + ("payload" in raw) + ("meta" in raw)
    if len(raw) != known:
        names = ", ".join(sorted(raw.keys() - ENVELOPE_KEYS))
        problems.append(
            _problem(index, names, f"Unknown envelope keys: {names}. An event has seq, type, payload, meta.")
        )
    seq = raw.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= MAX_SEQ:
        problems.append(
            _problem(
                index,
                "seq",
                f"seq must be an integer from 0 to {MAX_SEQ}: the event's 0-based number within its run.",
            )
        )
    type_ = raw.get("type")
    if not is_plain_id(type_):
        problems.append(
            _problem(
                index, "type", f"type must be a non-empty string of at most {MAX_ID_LENGTH} characters, without U+0000."
            )
        )
    elif isinstance(type_, str) and type_.startswith(SERVER_NAMESPACE):
        problems.append(_problem(index, "type", SERVER_NAMESPACE_RULE))
    meta = raw.get("meta")
    wall_clock_ms, meta_problems = _checked_meta(index, meta, from_otlp)
    problems += meta_problems
    if problems:
        return None, problems
    assert isinstance(meta, dict)  # each checked above; the asserts tell mypy
    assert isinstance(seq, int)
    assert isinstance(type_, str)
    try:
        body = canonical_bytes(raw)
    except orjson.JSONEncodeError:  # the one thing orjson refuses to write back: nesting past its limit
        return None, [_problem(index, "", f"The event nests deeper than {MAX_DEPTH} levels of arrays and objects.")]
    holds_nul = may_hold_nul and json_holds_nul(body)
    payload = raw.get("payload")
    # Positional: keyword arguments cost a measurable share of this per-event function.
    return Event(meta["runId"], seq, type_, meta, payload, "payload" in raw, body, holds_nul, wall_clock_ms), []


def parse_event_batch(body: bytes, *, max_events: int) -> list[Event]:
    """Parse `{"events": [...]}`; raise MalformedBody, BodyTooLarge or BatchInvalid."""
    document = parse_stream_json(body)
    if not isinstance(document, dict) or not isinstance(document.get("events"), list):
        raise BatchInvalid(
            'The body must be a JSON object {"events": [...]}, each event {seq, type, payload, meta}.',
            errors=[_problem(-1, "events", "events must be an array.")],
        )
    extra = document.keys() - {"events"}
    if extra:
        names = ", ".join(sorted(extra))
        raise BatchInvalid(
            f'Unknown top-level keys: {names}. The body is {{"events": [...]}}.',
            errors=[_problem(-1, names, "unknown key")],
        )
    raw_events = document["events"]
    if len(raw_events) > max_events:
        raise BodyTooLarge(
            f"A request may carry at most {max_events} events; this one has {len(raw_events)}. Split it into batches.",
            limit=max_events,
        )
    if not raw_events:
        raise BatchInvalid("events is empty: send at least one event.", errors=[_problem(-1, "events", "empty")])
    return check_events(raw_events, may_hold_nul=json_holds_nul(body))


def check_events(raw_events: list[Any], *, may_hold_nul: bool = True, from_otlp: bool = False) -> list[Event]:
    """Check every envelope; raise BatchInvalid naming each problem. The flags: see check_event."""
    events: list[Event] = []
    problems: list[dict[str, Any]] = []
    for index, raw in enumerate(raw_events):
        event, found = check_event(index, raw, may_hold_nul=may_hold_nul, from_otlp=from_otlp)
        if event is not None:
            events.append(event)
        problems.extend(found)
    if problems:
        bad = sorted({p["index"] for p in problems})
        shown = ", ".join(str(i) for i in bad[:10]) + (" …" if len(bad) > 10 else "")
        raise BatchInvalid(
            f"{len(bad)} event(s) are not valid agentfootprint envelopes (indexes {shown}); nothing was stored.",
            errors=problems,  # every one: a batch holds at most FOOTPRINT_MAX_EVENTS_PER_REQUEST events
        )
    return events
