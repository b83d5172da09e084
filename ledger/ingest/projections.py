"""What each event adds to the relational projections. Pure: events in, rows out.

Only events the server stores for the first time are projected, so every figure added here is
added exactly once however often a batch is re-sent.
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ledger.ingest.envelopes import MAX_SEQ, Event, replace_nul

PREFIX = "agentfootprint."

# The event that moved a run into each state; the one with the highest seq wins, but for the
# endings that throw (THROWN_ENDING_KEYS). `pause.resume`
# moves none: a resume runs as a new run (spec §2.4), so the run that paused keeps `paused` as its
# outcome whether the observer folded the event into it or it came under `consumer-scope`.
STATUS_BY_TYPE = {
    "agent.turn_start": "running",
    "pause.request": "paused",
    "agent.turn_end": "completed",
    "error.fatal": "failed",
    "permission.halt": "halted",
}
DENIED: Final = "denied"
MESSAGE_MOMENTS: Final = ("input", "output")
# Endings after which run()/resume() throws (MessageDeniedError, PolicyHaltError) are what
# happened to the run, whatever the framework emits after them: an input deny comes before
# `agent.turn_start`, an output deny before `agent.turn_end`. Their key outranks every event's seq
# (the runs' `status_seq` compares keys), so no later event and no order of arrival moves the run
# on from one; between the two, the rank here decides. A failure keeps its seq: a sub-agent's
# failure (an OTLP trace's nested agent span, say) is followed by the root agent's own ending.
THROWN_ENDING_KEYS: Final = {"halted": MAX_SEQ - 1, DENIED: MAX_SEQ}


def status_of(short_type: str, payload: Any) -> str | None:
    """The status an event of the framework moves its run to, or None.

    A listener's exception is `error.fatal` with stage 'observer' (spec §4.1): listeners are
    fire-and-forget, so the run goes on. A message middleware's deny (moment input or output)
    ends the run: the chart stops and `run()` throws MessageDeniedError (spec §1.6).
    """
    if short_type == "middleware.decision":
        is_message_deny = (
            isinstance(payload, dict) and payload.get("outcome") == "deny" and payload.get("moment") in MESSAGE_MOMENTS
        )
        return DENIED if is_message_deny else None
    if short_type == "error.fatal" and isinstance(payload, dict) and payload.get("stage") == "observer":
        return None
    return STATUS_BY_TYPE.get(short_type)


def json_text(payload: dict[str, Any], key: str) -> str | None:
    """The key's value as JSON text, or None when the key is absent (absent is not null)."""
    if key not in payload:
        return None
    return orjson.dumps(payload[key]).decode()


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None:
        return None
    return value if isinstance(value, str) else orjson.dumps(value).decode()


# Calls are looked up by id through btree indexes, whose keys hold about 2,700 bytes: 512
# characters (at most 2,048 bytes of UTF-8) always fit. A longer id (no provider's) files its
# event as no call's; the event is still stored as sent.
MAX_CALL_ID_CHARS: Final = 512


def call_id_of(payload: Any) -> str | None:
    """The payload's tool call id, as the projections and the event rows file it. Only a string
    is one: a call projected under "7" would find none of its events, which hold no id for 7."""
    value = payload.get("toolCallId") if isinstance(payload, dict) else None
    return value if isinstance(value, str) and len(value) <= MAX_CALL_ID_CHARS else None


# The largest whole numbers the projections keep: iterations go to int4 columns and per-call token
# counts are summed into a run's bigint ones; a duration may be any number JavaScript holds exactly.
# A number beyond is not a count or a duration the framework wrote: the column stays NULL (the
# event keeps the number).
INT4_LIMIT: Final = 2**31
SAFE_INTEGER_LIMIT: Final = 2**53


def _int(payload: dict[str, Any], key: str, limit: int = INT4_LIMIT) -> int | None:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -limit < value < limit:
        return None
    return int(value)


def _bool(payload: dict[str, Any], key: str) -> bool | None:
    value = payload.get(key)
    return value if isinstance(value, bool) else None


@dataclass
class RunDelta:
    """What one batch adds to one run's summary columns."""

    tokens_in: int = 0
    tokens_out: int = 0
    iterations: int = 0
    tool_calls: int = 0
    refusals: int = 0
    first_wall_ms: int | None = None
    last_wall_ms: int | None = None
    status: str | None = None
    status_seq: int = -1  # the key that set `status`: its event's seq, or a thrown ending's key
    agent_id: str | None = None
    cost_usd: float | None = None

    def see_wall_clock(self, ms: int | None) -> None:
        if ms is None:
            return
        if self.first_wall_ms is None or ms < self.first_wall_ms:
            self.first_wall_ms = ms
        if self.last_wall_ms is None or ms > self.last_wall_ms:
            self.last_wall_ms = ms


@dataclass
class Projection:
    """Rows keyed by the framework's runId; the service swaps in database ids when writing."""

    deltas: dict[str, RunDelta] = field(default_factory=dict)
    # Each call's columns by name (args and results stay in the events: ToolCall.with_args_and_result).
    tool_calls: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    verdicts: list[tuple[Any, ...]] = field(default_factory=list)
    effects: list[tuple[Any, ...]] = field(default_factory=list)
    refusals: list[tuple[Any, ...]] = field(default_factory=list)
    # What opens or closes asks (rare: handled by ledger.asks.services): pauses, check-in
    # outcomes, and the verdict rows a resumed middleware ask files (spec §1.7).
    ask_events: list[Event] = field(default_factory=list)
    # Calls' ends: a resumed run reporting one closes a takeover or a consent waiting on its call.
    call_ends: list[Event] = field(default_factory=list)

    def refusal(
        self,
        event: Event,
        category: str,
        rule: str | None,
        reason: str | None,
        *,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        iteration: int | None = None,
    ) -> None:
        self.refusals.append(
            (
                event.run_id,
                event.seq,
                event.type,
                category,
                rule,
                reason,
                tool_name,
                tool_call_id,
                iteration,
                event.wall_clock_ms,
            )
        )
        self.deltas[event.run_id].refusals += 1

    def tool_call(self, run_id: str, tool_call_id: str) -> dict[str, Any]:
        return self.tool_calls.setdefault((run_id, tool_call_id), {})


Projector = Callable[[Projection, Event, dict[str, Any]], None]


def _tool_start(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    call_id = call_id_of(payload)
    if call_id is None:
        return
    row = p.tool_call(e.run_id, call_id)
    row.update(tool_name=_str(payload, "toolName"), start_seq=e.seq)
    p.deltas[e.run_id].tool_calls += 1


def _tool_end(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    call_id = call_id_of(payload)
    if call_id is None:
        return
    p.tool_call(e.run_id, call_id).update(
        error=_bool(payload, "error"),
        status=_str(payload, "status"),
        duration_ms=_int(payload, "durationMs", SAFE_INTEGER_LIMIT),
        end_seq=e.seq,
    )
    p.call_ends.append(e)


def _llm_end(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    usage = payload.get("usage")
    if isinstance(usage, dict):
        delta = p.deltas[e.run_id]
        delta.tokens_in += _int(usage, "input") or 0
        delta.tokens_out += _int(usage, "output") or 0


def _iteration_start(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    p.deltas[e.run_id].iterations += 1


def _cost_tick(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    cumulative = payload.get("cumulative")
    estimate = cumulative.get("estimatedUsd") if isinstance(cumulative, dict) else None
    if isinstance(estimate, bool) or not isinstance(estimate, (int, float)) or not math.isfinite(estimate):
        return
    delta = p.deltas[e.run_id]
    delta.cost_usd = max(delta.cost_usd or 0.0, float(estimate))


def _run_configured(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    p.deltas[e.run_id].agent_id = _str(payload, "agentId")


# How a resumed middleware ask's own row begins (spec §1.7): the person's verdict on the call.
RESUMED_ASK_VERDICTS: Final = ("approved by ", "declined by ")


def resumed_ask_verdict(payload: Any) -> tuple[bool, str, str | None] | None:
    """A resumed middleware ask's own row (spec §1.7): the asking middleware's before-tool
    decision `approved by <by>[: <note>]` with outcome allow, or `declined by …` with deny;
    (approved, by, note), else None."""
    why = payload.get("why") if isinstance(payload, dict) else None  # per decision: no ABC check
    if not isinstance(why, str) or not why.startswith(RESUMED_ASK_VERDICTS):
        return None
    if payload.get("moment") != "before-tool" or not isinstance(payload.get("middleware"), str):
        return None
    approved = why.startswith(RESUMED_ASK_VERDICTS[0])
    if payload.get("outcome") != ("allow" if approved else "deny"):
        return None
    by, _, note = why.split(" by ", 1)[1].partition(": ")
    return approved, by, note or None


def _decision(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    outcome = _str(payload, "outcome") or ""
    p.decisions.append(
        (
            e.run_id,
            e.seq,
            _str(payload, "middleware") or "",
            _str(payload, "moment") or "",
            _str(payload, "at"),
            _str(payload, "phase"),
            _str(payload, "toolName"),
            call_id_of(payload),
            _int(payload, "iteration"),
            outcome,
            _bool(payload, "changed"),
            _str(payload, "why"),
            _str(payload, "componentId"),
            json_text(payload, "from"),
        )
    )
    if resumed_ask_verdict(payload) is not None:
        p.ask_events.append(e)
    if outcome == "deny":
        p.refusal(
            e,
            "middleware",
            _str(payload, "middleware"),
            _str(payload, "why"),
            tool_name=_str(payload, "toolName"),
            tool_call_id=call_id_of(payload),
            iteration=_int(payload, "iteration"),
        )


def _permission(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    halt = e.type.endswith("permission.halt")
    result = "halt" if halt else (_str(payload, "result") or "")
    p.verdicts.append(
        (
            e.run_id,
            e.seq,
            e.type.removeprefix(PREFIX),
            _str(payload, "capability"),
            _str(payload, "actor") or _str(payload, "checkerId"),
            _str(payload, "target"),
            result,
            _str(payload, "policyRuleId"),
            _str(payload, "rationale"),
            _str(payload, "reason"),
        )
    )
    if result in ("deny", "halt"):
        capability = _str(payload, "capability")
        rule = _str(payload, "policyRuleId") or _str(payload, "checkerId") or capability
        reason = _str(payload, "rationale") or _str(payload, "reason")
        # The target names a tool only for the tool gate (a halt is one); a skill, a memory or a
        # host is no tool to group refusals by.
        tool = _str(payload, "target") if capability in (None, "tool_call") else None
        p.refusal(e, "permission", rule, reason, tool_name=tool, iteration=_int(payload, "iteration"))


def _effect(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    outcome = _str(payload, "outcome") or ""
    p.effects.append(
        (
            e.run_id,
            e.seq,
            _str(payload, "kind") or "",
            outcome,
            _str(payload, "toolName"),
            call_id_of(payload),
            _int(payload, "iteration"),
            _str(payload, "targetSkillId"),
            _str(payload, "reason"),
            _str(payload, "instructionId"),
            _str(payload, "deliveryLease"),
            _str(payload, "refusalReason"),
            _str(payload, "supersededBy"),
        )
    )
    if outcome in ("refused", "superseded"):
        superseded_by = _str(payload, "supersededBy")
        reason = _str(payload, "refusalReason") or ("superseded by " + superseded_by if superseded_by else outcome)
        p.refusal(
            e,
            "effect",
            _str(payload, "kind"),
            reason,
            tool_name=_str(payload, "toolName"),
            tool_call_id=call_id_of(payload),
            iteration=_int(payload, "iteration"),
        )


def _refusal_of(
    category: str,
    rule_key: str,
    reason: Callable[[dict[str, Any]], str | None],
    when: Callable[[dict[str, Any]], bool] = lambda _: True,
    tool_key: str = "toolName",
) -> Projector:
    def project(p: Projection, e: Event, payload: dict[str, Any]) -> None:
        if when(payload):
            p.refusal(
                e,
                category,
                _str(payload, rule_key),
                reason(payload),
                tool_name=_str(payload, tool_key),
                tool_call_id=call_id_of(payload),
                iteration=_int(payload, "iteration"),
            )

    return project


def _issue_path(path: Any) -> str:
    # A JSON path is a list of keys and indexes; anything else is shown as it came.
    if isinstance(path, list):
        return ".".join(map(str, path)) or "(root)"
    return "(root)" if path is None else str(path)


def _issue_text(issue: Any) -> str:
    if not isinstance(issue, dict):
        return str(issue)
    # String-shape issues (pattern, minLength, maxLength; 9.64) quote the offending value, an
    # excerpt of at most 80 characters, and the parameter's description as `hint`.
    value = issue.get("value")
    got = orjson.dumps(value).decode() if isinstance(value, str) else issue.get("got")
    text = f"{_issue_path(issue.get('path'))}: expected {issue.get('expected')}, got {got}"
    hint = issue.get("hint")
    return text + (f" (described as: {hint})" if isinstance(hint, str) else "")


def _issues_text(payload: dict[str, Any]) -> str:
    issues = payload.get("issues")
    if not isinstance(issues, list):
        return "arguments did not match the tool's input schema"
    return "; ".join(map(_issue_text, issues))


# An unsupported-argument finding (9.63, the choice seam) names its call only in its first
# witness's provenance: "tool call <id>: argument '<path>' as the model chose it".
CALL_PROVENANCE: Final = ("tool call ", ": argument '")


def _integrity_error(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    tool_name = tool_call_id = None
    if payload.get("kind") == "unsupported-argument":
        subjects, witnesses = payload.get("subjects"), payload.get("witnesses")
        subject = subjects[0] if isinstance(subjects, list) and subjects else None
        if isinstance(subject, dict) and subject.get("kind") == "tool":
            tool_name = _str(subject, "id")
        witness = witnesses[0] if isinstance(witnesses, list) and witnesses else None
        provenance = witness.get("provenance") if isinstance(witness, dict) else None
        if isinstance(provenance, str) and provenance.startswith(CALL_PROVENANCE[0]):
            call, found, _ = provenance[len(CALL_PROVENANCE[0]) :].partition(CALL_PROVENANCE[1])
            tool_call_id = call_id_of({"toolCallId": call}) if found else None
    p.refusal(
        e,
        "integrity",
        _str(payload, "kind"),
        _str(payload, "message"),
        tool_name=tool_name,
        tool_call_id=tool_call_id,
        iteration=_int(payload, "iteration"),
    )


def _pause(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    p.ask_events.append(e)


def _checkin_decision(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    p.ask_events.append(e)
    if payload.get("approved") is False:
        by = _str(payload, "by")
        note = _str(payload, "note")
        reason = f"declined by {by}" + (f": {note}" if note else "")
        p.refusal(
            e,
            "checkin",
            by,
            reason,
            tool_name=_str(payload, "toolName"),
            tool_call_id=call_id_of(payload),
            iteration=_int(payload, "iteration"),
        )


def _reroute_superseded(p: Projection, e: Event, payload: dict[str, Any]) -> None:
    # Spec §3.7: a tool's accepted proposal outrun by a declared edge. Its `tools.effect` said
    # `accepted`; this event is the only record that it was overruled.
    if payload.get("source") != "tool-proposal":
        return
    won = _str(payload, "wonId")
    p.refusal(
        e,
        "effect",
        "propose-transition",
        f"proposal of '{_str(payload, 'volunteeredId')}' outrun by a declared edge" + (f" to '{won}'" if won else ""),
        iteration=_int(payload, "iteration"),
    )


def _skill_rejection_text(payload: dict[str, Any]) -> str:
    current = _str(payload, "currentSkillId")  # optional (spec §4.2): no "from" without it
    return f"skill '{payload.get('requestedId')}' is not allowed" + (f" from '{current}'" if current else "")


PROJECTORS: dict[str, Projector] = {
    "stream.tool_start": _tool_start,
    "stream.tool_end": _tool_end,
    "stream.llm_end": _llm_end,
    "agent.iteration_start": _iteration_start,
    "cost.tick": _cost_tick,
    "agent.run_configured": _run_configured,
    "middleware.decision": _decision,
    "permission.check": _permission,
    "permission.halt": _permission,
    "tools.effect": _effect,
    "checkin.decision": _checkin_decision,
    "checkin.request": _pause,
    "pause.request": _pause,
    "validation.args_invalid": _refusal_of(
        "validation", "toolName", _issues_text, when=lambda pl: pl.get("enforced") is True
    ),
    "tools.result_refused": _refusal_of(
        "ceiling",
        "toolName",
        lambda pl: f"result of {pl.get('sizeChars')} characters is over the tool's ceiling of {pl.get('maxChars')}",
    ),
    "skill.reroute_superseded": _reroute_superseded,
    "skill.rejected": _refusal_of(
        "skill",
        "requestedId",
        _skill_rejection_text,
    ),
    "artifacts.refused": _refusal_of("artifact", "op", lambda pl: _str(pl, "reason"), tool_key="tool"),
    "credential.failed": _refusal_of("credential", "service", lambda pl: _str(pl, "reason"), tool_key="tool"),
    "agent.evidence_checked": _refusal_of(
        "evidence",
        "posture",
        lambda pl: f"unsupported values: {orjson.dumps(pl.get('unsupported')).decode()}",
        when=lambda pl: pl.get("action") == "refused",
    ),
    "agent.output_contract_unmet": _refusal_of("output-contract", "brokenBy", lambda pl: _str(pl, "error")),
    "integrity.context_error": _integrity_error,
}


def project_events(events: Iterable[Event]) -> Projection:
    projection = Projection()
    for event in events:
        delta = projection.deltas.get(event.run_id)
        if delta is None:
            delta = projection.deltas[event.run_id] = RunDelta()
        delta.see_wall_clock(event.wall_clock_ms)
        if not event.type.startswith(PREFIX):
            continue  # not the framework's: kept verbatim, projected into nothing
        short_type = event.type[len(PREFIX) :]
        status = status_of(short_type, event.payload)
        if status:
            key = THROWN_ENDING_KEYS.get(status, event.seq)
            if key > delta.status_seq:
                delta.status, delta.status_seq = status, key
        projector = PROJECTORS.get(short_type)
        payload = event.payload
        if projector is not None and isinstance(payload, dict):
            if event.holds_nul:  # projections are queryable copies: U+FFFD there, as in `doc`
                payload = replace_nul(payload)
            projector(projection, event, payload)
    return projection
