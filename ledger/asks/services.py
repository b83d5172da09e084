"""Asks: a paused run waiting for a person, and the one decision it gets.

    Exactly once: a decision is a conditional UPDATE … WHERE status = 'open'; the loser is told who
won and when. The decision is appended to the run's hash chain as a server-authored event and
announced with NOTIFY, which wakes every long-poll waiting on it at once.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, NamedTuple

import orjson
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from footprint_site.celery import task_send_on_commit
from footprint_site.lib.db import session_connection
from footprint_site.lib.ids import MAX_ID_LENGTH, RUN_ID_RULE, is_plain_id, is_run_id
from footprint_site.lib.jsonbody import MAX_DEPTH, json_holds_nul
from ledger.asks import deadline_rules
from ledger.asks.approver_selectors import standing_approval_covering
from ledger.asks.approvers import decision_gate, quorum_approval_add, quorum_record
from ledger.asks.waits import ask_waiters_wake
from ledger.exceptions import (
    AskAlreadyDecided,
    AskInvalid,
    AskNotFound,
    AskOwnDecision,
    AskStaleDecision,
    AskSuperseded,
)
from ledger.ingest.envelopes import Event, replace_nul, wall_clock_ms_of
from ledger.ingest.projections import resumed_ask_verdict
from ledger.ingest.runs import CONSUMER_SCOPE, run_append_server_event, run_lock
from ledger.models import Ask, Run, RunEvent, StandingApproval, ToolCall, WebhookDelivery, ask_run_agent
from tenancy.models import AgentKey, Project

DECISION_EVENT = "ledger.human_decision"
MAX_NOTE_LENGTH = 2000
# How far ahead of the server's clock an agent's pause time may be and still order its session's
# asks: one clock far in the future would otherwise keep its ask the session's latest for ever.
MAX_CLOCK_AHEAD_MS = 5 * 60 * 1000
# The page's answer box holds as much; the value travels in the chain, the webhook and the pages.
MAX_VALUE_CHARS = 100_000
DECISION_VALUE_KEYS = frozenset({"kind", "value", "from", "coverage"})


# A person takeover is the pause of a tool that called `BrowserSession.handControlTo('person')`
# (agentfootprint 9.69): its pauseData names the driver it handed the browser to. Approving it
# hands control back to the agent, which resumes on the page the person left.
TAKEOVER_KEY = "handControlTo"


def ask_fields(pause_data: dict[str, Any]) -> dict[str, Any]:
    """What kind of pause this is (the framework's `pauseDemandsDecision`) and what to show for it."""
    check_in = pause_data.get("checkIn")
    middleware_ask = pause_data.get("ask")
    if isinstance(check_in, dict):
        evidence = check_in.get("evidence")
        evidence = evidence if isinstance(evidence, dict) else {}
        return {
            "kind": Ask.Kind.CHECK_IN,
            "check_in": check_in,
            "component": check_in.get("component"),
            "question": evidence.get("willDo") if isinstance(evidence.get("willDo"), str) else None,
        }
    if isinstance(middleware_ask, dict):
        return {
            "kind": Ask.Kind.ASK,
            "question": middleware_ask.get("question"),
            "detail": middleware_ask.get("detail"),
            "middleware": middleware_ask.get("middleware"),
            "component": middleware_ask.get("component"),
        }
    authorization = pause_data.get("authorization")
    if isinstance(authorization, dict):
        # The consent URL is a bearer capability (the framework withholds it from its own events):
        # what is shown is the service the step needs, never the URL.
        service = authorization.get("service")
        return {
            "kind": Ask.Kind.CREDENTIAL,
            "question": pause_data.get("question"),
            "detail": {"service": service} if isinstance(service, str) else None,
        }
    if pause_data.get(TAKEOVER_KEY) == "person":
        return {
            "kind": Ask.Kind.TAKEOVER,
            "question": pause_data.get("question"),
            "detail": {k: v for k, v in pause_data.items() if k not in ("toolCallId", "toolName", "question")},
            "component": pause_data.get("component"),
        }
    question = pause_data.get("question")
    return {
        "kind": Ask.Kind.PLAIN,
        "question": question if isinstance(question, str) else None,
        "detail": {k: v for k, v in pause_data.items() if k not in ("toolCallId", "toolName")} or None,
        "component": pause_data.get("component"),
    }


def _check_pause_data(pause_data: Any) -> dict[str, Any]:
    if not isinstance(pause_data, dict):
        raise AskInvalid("pauseData must be the paused outcome's pauseData object {toolCallId, toolName, …}.")
    if not is_plain_id(pause_data.get("toolCallId")):
        raise AskInvalid(
            "pauseData.toolCallId is required: an ask is opened for one tool call "
            f"(a non-empty string of at most {MAX_ID_LENGTH} characters, without U+0000)."
        )
    return pause_data


def _path_of_nul(value: Any, path: str) -> str | None:
    """Where the first U+0000 in a JSON value is, e.g. 'pauseData.question'."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return path
        found = _path_of_nul(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]")
        if found:
            return found
    return None


def _check_id(name: str, value: Any, *, required: bool) -> None:
    if (value is not None or required) and not is_plain_id(value):
        raise AskInvalid(f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters, without U+0000.")


# A decision without `value`: not the same as one whose value is JSON null (a question's answer).
NO_VALUE: Final[Any] = object()


def _check_decision(ask: Ask, via: str, by_label: str, note: str | None, value: Any) -> None:
    """What a decision may carry: it is stored in text and jsonb columns and hashed into the chain,
    and a consent gate's value is what the framework resumes with (spec §2.4, §2.7)."""
    if not by_label or len(by_label) > MAX_ID_LENGTH or "\x00" in by_label:
        raise AskInvalid(f"by must be a non-empty name of at most {MAX_ID_LENGTH} characters, without U+0000.")
    if note is not None and (len(note) > MAX_NOTE_LENGTH or "\x00" in note):
        raise AskInvalid(f"note must be at most {MAX_NOTE_LENGTH} characters, without U+0000.")
    if value is NO_VALUE:
        # The answer is the tool's result; only the deadline pass closes a question without one.
        if ask.kind == Ask.Kind.PLAIN and via != Ask.Via.DEADLINE:
            raise AskInvalid("A question (askHuman) is answered: send value, the answer its tool returns to the run.")
        return
    if ask.kind == Ask.Kind.PLAIN and isinstance(value, str) and not value.strip():
        raise AskInvalid("value, the answer to a question (askHuman), cannot be empty: write what the run should hear.")
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise AskInvalid(f"value nests deeper than {MAX_DEPTH} levels of arrays and objects.") from None
    characters = len(written.decode())
    if characters > MAX_VALUE_CHARS:
        raise AskInvalid(f"value may be at most {MAX_VALUE_CHARS:,} characters of JSON; this one is {characters:,}.")
    if json_holds_nul(written):
        raise AskInvalid("value must not contain U+0000.")
    if ask.kind in (Ask.Kind.PLAIN, Ask.Kind.TAKEOVER):
        # Any value, null included, is an answer (spec §2.1); a takeover is an askHuman pause too,
        # whose value, when one is sent, is what the tool resumes with.
        return
    if not _is_decision_value(value):
        raise AskInvalid(
            "value of a check-in or middleware ask is a DecisionValue {kind, value, from?, coverage?}: "
            "kind a string naming what was chosen, value the choice."
        )
    asked = ask.component.get("propsRef") if isinstance(ask.component, dict) else None
    answered = value.get("from") if isinstance(value, dict) else None
    if asked and answered is not None and answered != asked:  # the framework would refuse to resume with it
        raise AskStaleDecision(
            f"The ask showed artifact {asked}, and this decision was made on {answered}: the data "
            "changed since it was asked. Decide on what the ask shows, or let the run ask again.",
            asked=asked,
            answered=answered,
        )


def _is_decision_value(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("kind"), str)
        and "value" in value
        and value.keys() <= DECISION_VALUE_KEYS
    )


def _fields_for_model(pause_data: dict[str, Any]) -> dict[str, Any]:
    # Shown and queried copies: U+0000 cannot live in text or jsonb columns (the event that
    # carried it keeps its exact bytes in the chain).
    pause_data = replace_nul(pause_data)
    fields = ask_fields(pause_data)
    for text in ("question", "middleware"):
        if text in fields and not isinstance(fields[text], str):
            fields[text] = None
    if fields.get("component") is not None and not isinstance(fields["component"], dict):
        fields["component"] = None
    tool_name = pause_data.get("toolName")
    return {**fields, "tool_name": tool_name if isinstance(tool_name, str) else None, "pause_data": pause_data}


@transaction.atomic
def ask_open(
    *,
    project: Project,
    key: AgentKey | None,
    run_id: str,
    session_id: str | None,
    pause_data: Any,
    checkpoint: bytes | None,
    deadline: datetime | None,
    on_timeout: str,
    paused_at_ms: Any = None,
) -> tuple[Ask, bool]:
    """Open the ask of a paused tool call, or return the one already open for it (idempotent).

    A re-post carrying a checkpoint the first post lacked (an ask opened from events) stores it
    and binds it to this key, the only caller it is ever returned to; one carrying a deadline the
    ask lacks sets it, with its onTimeout. Every key that posts it is barred from deciding it.
    `paused_at_ms`, the agent's clock at the pause, orders the session's asks as a pause event's
    `meta.wallClockMs` does (`_supersede_in_session`).
    """
    data = _check_pause_data(pause_data)
    nul_at = _path_of_nul(data, "pauseData")
    if nul_at:
        raise AskInvalid(f"{nul_at} contains U+0000, which an ask cannot keep (it is shown and stored as JSON).")
    if not is_run_id(run_id):
        raise AskInvalid(RUN_ID_RULE.removeprefix("meta."))
    _check_id("sessionId", session_id, required=False)
    if on_timeout not in Ask.OnTimeout.values:
        raise AskInvalid("onTimeout must be 'decline' or 'approve'.")
    if paused_at_ms is not None:
        clock = wall_clock_ms_of(paused_at_ms)
        if clock is None:
            raise AskInvalid("pausedAtMs must be a Unix time in milliseconds, by the clock of the run's events.")
        # An agent whose clock runs fast still opens its ask; it is ordered by arrival.
        paused_at_ms = clock if clock - _now_ms() <= MAX_CLOCK_AHEAD_MS else None
    # Before the insert, and whether or not a session is known: an ask already opened from its
    # events may be in one (a `consumer-scope` pause names it, its run does not).
    _lock_sessions(project.pk)
    if session_id is None:  # a run's events may have named its session before the agent's POST
        session_id = Run.objects.filter(project=project, run_id=run_id).values_list("session_id", flat=True).first()
    defaults = {
        **_fields_for_model(data),
        "session_id": session_id,
        "checkpoint": checkpoint,
        "posted_by_key": key if checkpoint is not None else None,
        "reporting_key_ids": [] if key is None else [key.pk],
        "deadline": deadline,
        "on_timeout": on_timeout,
        "paused_at_ms": paused_at_ms,
    }
    try:
        with transaction.atomic():
            ask = Ask.objects.create(project=project, run_id=run_id, tool_call_id=data["toolCallId"], **defaults)
    except IntegrityError:
        pass
    else:
        _supersede_in_session(ask)
        if _close_if_reported_already(ask):
            ask.refresh_from_db()
        else:
            ask = _decide_if_standing(ask) or ask
        deadline_rules.ask_opened(ask)
        return ask, True
    ask = Ask.objects.select_for_update().get(project=project, run_id=run_id, tool_call_id=data["toolCallId"])
    _bar_from_deciding(ask, key)
    updated = []
    if checkpoint is not None and ask.checkpoint is None:
        ask.checkpoint, ask.posted_by_key = checkpoint, key
        updated += ["checkpoint", "posted_by_key"]
    if deadline and not ask.deadline:
        ask.deadline, ask.on_timeout = deadline, on_timeout
        updated += ["deadline", "on_timeout"]
    if session_id and ask.session_id is None:  # opened from events that did not name it
        ask.session_id = session_id
        updated += ["session_id"]
    if ask.opened_from_event:  # the agent's POST, made the moment it paused, orders it by arrival
        ask.opened_from_event = False
        updated += ["opened_from_event"]
    if paused_at_ms is not None and ask.paused_at_ms is None:
        ask.paused_at_ms = paused_at_ms
        updated += ["paused_at_ms"]
    if updated:
        ask.save(update_fields=updated)
    if {"session_id", "opened_from_event", "paused_at_ms"} & set(updated):
        _supersede_in_session(ask)
    return ask, False


def _supersede_in_session(ask: Ask) -> None:
    """Keep `ask`'s session at one open ask, its latest (spec §9.3): the host refuses a new turn
    while a question is outstanding (ERR_AWAITING_DECISION), so a session that paused again had
    its earlier pause answered elsewhere or dropped; no run waits on that ask, and a decision there
    would reach nothing. Every open ask that a later ask follows is superseded by the session's
    latest (its long-polls woken, to be told); a superseded ask found to be the latest after all
    (its pause event came late and named an earlier time for the other) is open again. Decided
    asks stay as they are, and count: the session paused again all the same. `ask` is refreshed.
    """
    if ask.session_id is None:
        return
    _lock_sessions(ask.project_id)
    session = [
        _Pause(*row)
        for row in Ask.objects.filter(project_id=ask.project_id, session_id=ask.session_id).values_list(
            "pk", "status", "paused_at_ms", "opened_from_event", "pause_reported"
        )
    ]
    latest = _latest(session) or [_last_arrived_not_earlier_by_clock(session)]
    live = max(latest, key=lambda pause: pause.pk)
    undecided = (Ask.Status.OPEN, Ask.Status.SUPERSEDED)
    reopen = [pause.pk for pause in latest if pause.status == Ask.Status.SUPERSEDED]
    stale = [pause.pk for pause in session if pause.status == Ask.Status.OPEN and pause not in latest]
    if reopen:
        Ask.objects.filter(pk__in=reopen, status=Ask.Status.SUPERSEDED).update(
            status=Ask.Status.OPEN, superseded_by=None
        )
    if stale:
        # A decision that commits meanwhile wins: the UPDATE re-reads the row, no longer open.
        Ask.objects.filter(pk__in=stale, status=Ask.Status.OPEN).update(
            status=Ask.Status.SUPERSEDED, superseded_by=live.pk
        )
        for ask_id in stale:
            ask_waiters_wake(ask_id)
    # Each superseded ask names the ask that closed it; after a reopen, the ones that named an ask
    # now closed again name the live one (a reopen is rare: no rewrite of them on every pause).
    if reopen and len(latest) == 1:
        Ask.objects.filter(project_id=ask.project_id, session_id=ask.session_id, status=Ask.Status.SUPERSEDED).exclude(
            superseded_by=live.pk
        ).update(superseded_by=live.pk)
    if ask.status in undecided:
        ask.refresh_from_db(fields=["status", "superseded_by"])


class _Pause(NamedTuple):
    """One ask of a session, as the order of its pauses needs it."""

    pk: int  # the order of arrival
    status: str
    paused_at_ms: int | None  # its pause event's meta.wallClockMs, the agent's clock
    opened_from_event: bool  # first known from its pause event, not from the agent's POST
    pause_reported: bool  # its pause event is stored (with or without a clock)


def _later(later: _Pause, earlier: _Pause) -> bool:
    """Whether `later` paused after `earlier`, as far as the server can tell: by the agent's clock
    when both pause events carried it, else by arrival; but a pause event arriving after an ask
    only POSTed so far may have waited in the observer's buffer, and orders nothing until that
    ask's own event does (an agent posts its ask the moment it pauses)."""
    if later.paused_at_ms is not None and earlier.paused_at_ms is not None:
        return (later.paused_at_ms, later.pk) > (earlier.paused_at_ms, earlier.pk)
    if later.pk <= earlier.pk:
        return False
    return not (later.opened_from_event and not earlier.pause_reported)


def _latest(session: list[_Pause]) -> list[_Pause]:
    """The asks no other ask of the session follows: one, or more while a POSTed ask's own pause
    event has yet to order them. Any other ask is followed by one of these three."""
    posted_only = [pause for pause in session if not pause.pause_reported]
    clocked = [pause for pause in session if pause.paused_at_ms is not None]
    candidates = {max(session, key=lambda pause: pause.pk)}
    if posted_only:
        candidates.add(max(posted_only, key=lambda pause: pause.pk))
    if clocked:
        candidates.add(max(clocked, key=lambda pause: (pause.paused_at_ms, pause.pk)))
    return [pause for pause in candidates if not any(_later(other, pause) for other in session)]


def _last_arrived_not_earlier_by_clock(session: list[_Pause]) -> _Pause:
    """When clocks and arrivals go round in a circle (every ask followed by another): the last to
    arrive of the asks that no clocked ask follows by the clock."""
    last_clocked = max(
        (pause for pause in session if pause.paused_at_ms is not None),
        key=lambda pause: (pause.paused_at_ms, pause.pk),
        default=None,
    )
    return max(
        (pause for pause in session if pause.paused_at_ms is None or pause is last_clocked),
        key=lambda pause: pause.pk,
    )


def _now_ms() -> int:
    return int(timezone.now().timestamp() * 1000)


def _lock_sessions(project_id: int) -> None:
    """The lock on the project's sessions, for the rest of the transaction, taken before any ask
    row is touched (here, in `ask_open` before its insert, in `asks_from_events` before its first
    ask): two asks opened at once then see each other committed. One lock for all of a project's
    sessions: a batch may touch several, in any order, and pauses come at human speed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"ask-sessions:{project_id}"])


def _bar_from_deciding(ask: Ask, key: AgentKey | None) -> None:
    """Record that `key` reported the ask too (in one statement: the agent's POST and its events
    may report it at once)."""
    if key is None or key.pk in ask.reporting_key_ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE ledger_ask SET reporting_key_ids = array_append(reporting_key_ids, %s)"
            " WHERE id = %s AND NOT %s = ANY(reporting_key_ids)",
            [key.pk, ask.pk, key.pk],
        )


def _run_of_pause(project: Project, event: Event, tool_call_id: str) -> str:
    """The run that paused. 9.62.0 emits pause events under the runId 'consumer-scope', so that one
    is traced back through the tool call it paused (the latest unfinished call with its id)."""
    if event.run_id != CONSUMER_SCOPE:
        return event.run_id
    call = (
        ToolCall.objects.unfinished()
        .filter(run__project=project, tool_call_id=tool_call_id)
        .select_related("run")
        .order_by("-run__id")
        .first()
    )
    return call.run.run_id if call else event.run_id


PAUSE_TYPES = frozenset({"pause.request", "checkin.request"})


def _pause_data_of(event: Event) -> dict[str, Any] | None:
    """The paused outcome's pauseData a `pause.request` / `checkin.request` event reports, when it
    names a tool call id the server can keep (the event itself is kept, verbatim, either way)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    pause_data: Any = payload.get("questionPayload")
    if event.type.removeprefix("agentfootprint.") == "checkin.request":
        pause_data = {
            "toolCallId": payload.get("toolCallId"),
            "toolName": payload.get("toolName"),
            "checkIn": payload.get("request"),
        }
    if not isinstance(pause_data, dict) or not is_plain_id(pause_data.get("toolCallId")):
        return None
    return pause_data


def runs_traced_from_consumer_scope(*, project: Project, events: list[Event]) -> set[str]:
    """The runs that the `consumer-scope` pauses among `events` pause (`_run_of_pause`): ingestion
    locks them with the batch's own runs, in one order, before `asks_from_events` writes them."""
    traced = set()
    for event in events:
        if event.run_id == CONSUMER_SCOPE and event.type.removeprefix("agentfootprint.") in PAUSE_TYPES:
            pause_data = _pause_data_of(event)
            if pause_data is not None:
                traced.add(_run_of_pause(project, event, pause_data["toolCallId"]))
    return traced - {CONSUMER_SCOPE}


def asks_from_events(*, project: Project, events: list[Event], key: AgentKey | None) -> None:
    """Open asks from ingested `pause.request` / `checkin.request` events, opened by `key` (the
    agent key that posted them, which so may not decide them); close them on what a resumed run
    reports decided elsewhere: a `checkin.decision`, a middleware ask's verdict row (spec §1.7:
    that path files no check-in events), or, for a person takeover and an authorization consent,
    the resumed run's end of the paused call. Runs inside the ingestion transaction, after its run
    locks; takes the sessions' lock (`_lock_sessions`) before it touches an ask."""
    reported: list[tuple[str, dict[str, Any], Event, str]] = []  # (type, decision or pauseData, event, run)
    for event in events:
        short = event.type.removeprefix("agentfootprint.")
        if short in ("checkin.decision", "middleware.decision"):
            reported.append((short, event.payload if isinstance(event.payload, dict) else {}, event, event.run_id))
            continue
        pause_data = _pause_data_of(event)
        if pause_data is None:
            continue
        run_id = _run_of_pause(project, event, pause_data["toolCallId"])
        if run_id != event.run_id:  # 9.62.0's `consumer-scope` pause: the run it traced to is paused
            # Ingestion locked the run it traced with its own (runs_traced_from_consumer_scope). A
            # call another batch committed since may trace elsewhere, to a run that batch holds:
            # waiting for it could deadlock, so that run's status is left to its own events.
            traced = Run.objects.filter(project=project, run_id=run_id, status=Run.Status.RUNNING)
            Run.objects.filter(
                pk__in=list(traced.select_for_update(skip_locked=True).values_list("pk", flat=True))
            ).update(status=Run.Status.PAUSED, status_seq=F("max_seq"))
        reported.append((short, pause_data, event, run_id))
    if not reported:
        return
    _lock_sessions(project.pk)
    # A resumed run's report is an agent's: a key that may not handle asks (an exporter's, a log
    # shipper's) stores it as evidence and closes nothing with it.
    may_report = key is None or AgentKey.Scope.ASKS in key.scopes
    key_id = None if key is None else key.pk
    for short, data, event, run_id in reported:
        if short == "checkin.decision":
            if may_report:
                _close_reported_check_in(project, data, _reporter_of(project, event, key_id))
        elif short == "middleware.decision":
            if may_report:
                _close_reported_middleware_ask(project, data, _reporter_of(project, event, key_id))
        else:
            _open_reported(project, key, short, data, event.meta, run_id)


# The partial index `ask_handoff_waiting` answers it without touching a row when none waits.
_HANDOFF_WAITING = "SELECT 1 FROM ledger_ask WHERE project_id = %s AND kind = ANY(%s) AND status = ANY(%s) LIMIT 1"


def asks_close_handed_back(*, project: Project, ends: list[Event], key: AgentKey | None) -> None:
    """Close the person takeovers and authorization consents whose paused call a resumed run now
    reports ended (`stream.tool_end`), as `asks_from_events` closes the other kinds. Ingestion calls
    it for every batch with a call's end, inside its transaction: one indexed question first says
    whether any such ask waits in the project at all, which it almost never does."""
    if key is not None and AgentKey.Scope.ASKS not in key.scopes:
        return  # a key that may not handle asks stores its report as evidence and closes nothing
    with connection.cursor() as cursor:
        cursor.execute(_HANDOFF_WAITING, [project.pk, list(CLOSED_BY_RESUMED_END), list(UNDECIDED)])
        if cursor.fetchone() is None:
            return
    ends = _ends_of_waiting_calls(project, ends)
    if not ends:
        return
    _lock_sessions(project.pk)
    key_id = None if key is None else key.pk
    for event in ends:
        _close_by_resumed_end(project, event.payload["toolCallId"], _reporter_of(project, event, key_id))


def _open_reported(
    project: Project, key: AgentKey | None, short: str, pause_data: dict[str, Any], meta: dict[str, Any], run_id: str
) -> None:
    session_id = meta.get("sessionId") or (
        Run.objects.filter(project=project, run_id=run_id).values_list("session_id", flat=True).first()
    )
    paused_at_ms = wall_clock_ms_of(meta.get("wallClockMs"))
    if paused_at_ms is not None and paused_at_ms - _now_ms() > MAX_CLOCK_AHEAD_MS:
        paused_at_ms = None  # the event is kept as sent; a clock this far ahead orders nothing
    existing = Ask.objects.filter(project=project, run_id=run_id, tool_call_id=pause_data["toolCallId"]).first()
    if existing is None:
        try:
            with transaction.atomic():  # the agent's own POST /asks may open it at this moment
                opened = Ask.objects.create(
                    project=project,
                    run_id=run_id,
                    tool_call_id=pause_data["toolCallId"],
                    session_id=session_id,
                    paused_at_ms=paused_at_ms,
                    opened_from_event=True,
                    pause_reported=True,
                    reporting_key_ids=[] if key is None else [key.pk],
                    **_fields_for_model(pause_data),
                )
        except IntegrityError:
            existing = Ask.objects.get(project=project, run_id=run_id, tool_call_id=pause_data["toolCallId"])
        else:
            _supersede_in_session(opened)
            if not _close_if_reported_already(opened) and _decide_if_standing(opened) is None:
                deadline_rules.ask_opened(opened)
            return
    _bar_from_deciding(existing, key)
    updates: dict[str, Any] = {}
    if short == "checkin.request" and existing.kind != Ask.Kind.CHECK_IN:
        updates.update(_fields_for_model(pause_data))
    if existing.session_id is None and session_id:
        updates["session_id"] = existing.session_id = session_id
    if not existing.pause_reported:  # the POSTed ask's own pause event: now the two can be ordered
        updates["pause_reported"] = existing.pause_reported = True
        if paused_at_ms is not None:  # the event's clock over the POST's pausedAtMs, if any
            updates["paused_at_ms"] = existing.paused_at_ms = paused_at_ms
    if updates:
        Ask.objects.filter(pk=existing.pk).update(**updates)
    if "session_id" in updates or "pause_reported" in updates:
        _supersede_in_session(existing)


# What a `checkin.decision` may close: a check-in, or a middleware ask an integration resumed;
# never a question (its answer is the tool's result) nor a consent gate.
CLOSED_BY_CHECKIN_REPORTS = (Ask.Kind.CHECK_IN, Ask.Kind.ASK)
# What the resumed run's end of the paused call closes: the framework files no decision event for
# these two, and the call's end is where the resumed run reports it carried on.
CLOSED_BY_RESUMED_END = (Ask.Kind.TAKEOVER, Ask.Kind.CREDENTIAL)
UNDECIDED = (Ask.Status.OPEN, Ask.Status.SUPERSEDED)
CREDENTIAL_ISSUED = "agentfootprint.credential.acquired"
TOOL_END = "agentfootprint.stream.tool_end"


class _Reporter(NamedTuple):
    """The resumed run that reports a decision: its id, and its session and agent where known
    (`meta.sessionId` of the report, else its run's; the run's agent id; the key that sent it)."""

    run_id: str
    run_pk: int | None
    session_id: str | None
    agent_id: str | None
    key_id: int | None
    at_ms: int | None


def _reporter_of(project: Project, event: Event, key_id: int | None) -> _Reporter:
    run = Run.objects.filter(project=project, run_id=event.run_id).values_list("pk", "session_id", "agent_id").first()
    run_pk, run_session, agent_id = run if run else (None, None, None)
    session_id = event.meta.get("sessionId")
    return _Reporter(
        event.run_id,
        run_pk,
        session_id if is_plain_id(session_id) else run_session,
        agent_id,
        key_id,
        event.wall_clock_ms,
    )


def _ends_of_waiting_calls(project: Project, ends: list[Event]) -> list[Event]:
    """The `stream.tool_end` events among `ends` whose call a takeover or a consent of another
    run still waits on."""
    by_call = {
        event.payload["toolCallId"]: event
        for event in ends
        if isinstance(event.payload, dict) and is_plain_id(event.payload.get("toolCallId"))
    }
    if not by_call:
        return []
    waiting = set(
        Ask.objects.filter(
            project=project, tool_call_id__in=list(by_call), kind__in=CLOSED_BY_RESUMED_END, status__in=UNDECIDED
        ).values_list("tool_call_id", "run_id")
    )
    return [
        event
        for event in ends
        if isinstance(event.payload, dict)
        and any(call == event.payload.get("toolCallId") and run != event.run_id for call, run in waiting)
    ]


def _close_reported_check_in(project: Project, payload: Mapping[str, Any], reporter: _Reporter) -> bool:
    """Close the ask its resumed run reports decided elsewhere with a `checkin.decision` (the
    framework files one for a check-in)."""
    tool_call_id, approved = payload.get("toolCallId"), payload.get("approved")
    if not is_plain_id(tool_call_id) or not isinstance(approved, bool):
        return False
    asks = Ask.objects.filter(project=project, tool_call_id=tool_call_id, kind__in=CLOSED_BY_CHECKIN_REPORTS)
    ask = _the_ask_reported(asks, reporter)
    return ask is not None and _claim_reported(ask, approved, payload.get("by"), payload.get("note"))


def _close_reported_middleware_ask(project: Project, payload: Mapping[str, Any], reporter: _Reporter) -> bool:
    """Close the middleware ask its resumed run reports decided elsewhere (its verdict row)."""
    verdict, tool_call_id, middleware = (
        resumed_ask_verdict(payload),
        payload.get("toolCallId"),
        payload.get("middleware"),
    )
    if verdict is None or not is_plain_id(tool_call_id) or not is_plain_id(middleware):
        return False
    asks = Ask.objects.filter(project=project, tool_call_id=tool_call_id, kind=Ask.Kind.ASK, middleware=middleware)
    ask = _the_ask_reported(asks, reporter)
    return ask is not None and _claim_reported(ask, *verdict)


def _close_by_resumed_end(project: Project, tool_call_id: str, reporter: _Reporter) -> bool:
    """Close the takeover or consent whose call the resumed run ended. A takeover's run carried on
    with the controls handed back; a consent was granted when that run was issued the credential
    (`credential.acquired` for the service) and still missing when it was not (the framework then
    hands the model a refusal and may pause afresh)."""
    # A fresh runId is what makes the run a resumed one (spec §2.4): the paused run's own calls
    # close nothing.
    asks = Ask.objects.filter(project=project, tool_call_id=tool_call_id, kind__in=CLOSED_BY_RESUMED_END).exclude(
        run_id=reporter.run_id
    )
    ask = _the_ask_reported(asks, reporter)
    if ask is None:
        return False
    by = f"resumed run {reporter.run_id}"
    if ask.kind == Ask.Kind.TAKEOVER:
        return _claim_reported(ask, True, by, "the resumed run took the controls back and carried on")
    service = (ask.detail or {}).get("service") if isinstance(ask.detail, dict) else None
    issued = (
        reporter.run_pk is not None
        and isinstance(service, str)
        and RunEvent.objects.filter(
            run_id=reporter.run_pk, type=CREDENTIAL_ISSUED, doc__payload__service=service
        ).exists()
    )
    note = "the resumed run was issued the credential" if issued else "the resumed run still lacked the authorization"
    return _claim_reported(ask, issued, by, note)


MAX_SAME_CALL = 20  # asks of one call id read to find a report's own: more are other runs' ids


def _the_ask_reported(asks: QuerySet[Ask], reporter: _Reporter) -> Ask | None:
    """The one undecided ask among `asks` (one tool call's) that `reporter`'s run resumed, or None.

    The resumed run reports under a new runId: the ask is found by its tool call, in the run's own
    session and agent. Ids like 'op-5' repeat across sessions (scripted and mock providers reuse
    them), so an ask of another session or agent is never a candidate; when the run names no
    session, its agent key's asks are preferred. More than one left is an ambiguity nothing
    settles: nothing is decided (one session paused twice on one call id: the ask page says why,
    `selectors.ask_unresolved_report`). A decided ask counts: the report may be the echo of a
    decision made here. A superseded ask is decided too: the run's report is evidence, the
    supersede a derivation (its session paused again before the resumed run's events arrived). A
    report the agent's clock puts before the pause is another run's, never this pause's answer."""
    asks = asks.annotate(agent_id=ask_run_agent()).only(
        "pk", "status", "session_id", "run_id", "paused_at_ms", "reporting_key_ids", "kind", "detail"
    )
    # Narrowed in the query first: a scripted id may have paused in many sessions of the project.
    if reporter.session_id is not None:
        asks = asks.filter(Q(session_id=reporter.session_id) | Q(session_id__isnull=True))
    elif reporter.key_id is not None:
        own = asks.filter(reporting_key_ids__contains=[reporter.key_id])
        asks = own if own.exists() else asks
    candidates = list(asks.order_by("pk")[:MAX_SAME_CALL])
    if reporter.session_id is not None:
        same = [ask for ask in candidates if ask.session_id == reporter.session_id]
        candidates = same or candidates  # else the asks whose session is not known
    if reporter.agent_id is not None:
        candidates = [ask for ask in candidates if getattr(ask, "agent_id", None) in (None, reporter.agent_id)]
    if len(candidates) != 1 or candidates[0].status not in UNDECIDED:
        return None
    ask = candidates[0]
    if reporter.at_ms is not None and ask.paused_at_ms is not None and reporter.at_ms < ask.paused_at_ms:
        return None
    return ask


def _claim_reported(ask: Ask, approved: bool, by: object, note: object) -> bool:
    """Record the decision a resumed run reports for `ask`, unless one was recorded meanwhile."""
    claimed = Ask.objects.filter(pk=ask.pk, status__in=UNDECIDED).update(
        status=Ask.Status.DECIDED,
        superseded_by=None,
        approved=approved,
        decided_by_label=replace_nul(by) if isinstance(by, str) else "",
        decided_at=timezone.now(),
        decided_via=Ask.Via.RUN,
        note=replace_nul(note) if isinstance(note, str) else None,
    )
    if claimed:
        # The run's own report is the chain's record of it; the long-polls still wake.
        ask_waiters_wake(ask.pk)
    return bool(claimed)


def _close_if_reported_already(ask: Ask) -> bool:
    """A new ask whose resumed run already reported its decision (its events came first, a
    batch of another run flushed sooner): closed by that report as it would have been. Whether it
    was."""
    if ask.kind not in (*CLOSED_BY_CHECKIN_REPORTS, *CLOSED_BY_RESUMED_END):
        return False
    # The resumed run holds the call as a row of its own (an end without a start).
    resumed_calls = ToolCall.objects.filter(run__project=ask.project, tool_call_id=ask.tool_call_id).exclude(
        run__run_id=ask.run_id
    )
    if ask.kind in CLOSED_BY_RESUMED_END:
        ended = resumed_calls.filter(end_seq__isnull=False).values_list(
            "run__run_id", "run_id", "run__session_id", "run__agent_id"
        )[:MAX_REPORTS_READ]
        for run_id, run_pk, session_id, agent_id in ended:
            at_ms = (
                RunEvent.objects.filter(run_id=run_pk, tool_call_id=ask.tool_call_id, type=TOOL_END)
                .values_list("wall_clock_ms", flat=True)
                .first()
            )
            reporter = _Reporter(run_id, run_pk, session_id, agent_id, None, at_ms)
            if _close_by_resumed_end(ask.project, ask.tool_call_id, reporter):
                return True
        return False
    reports = RunEvent.objects.filter(
        run__in=resumed_calls.values("run"),
        tool_call_id=ask.tool_call_id,
        type__in=["agentfootprint.checkin.decision", "agentfootprint.middleware.decision"],
    ).values_list("type", "doc", "wall_clock_ms", "run__run_id", "run_id", "run__session_id", "run__agent_id")[
        :MAX_REPORTS_READ
    ]
    for type_, doc, wall_clock_ms, run_id, run_pk, run_session, agent_id in reports:
        payload = doc.get("payload") if isinstance(doc, dict) else None
        if not isinstance(payload, dict):
            continue
        meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
        session_id = meta.get("sessionId") if is_plain_id(meta.get("sessionId")) else run_session
        reporter = _Reporter(run_id, run_pk, session_id, agent_id, None, wall_clock_ms)
        close = _close_reported_check_in if type_.endswith("checkin.decision") else _close_reported_middleware_ask
        if close(ask.project, payload, reporter):
            return True
    return False


MAX_REPORTS_READ = 20  # of one tool call's: the resumed run files one; more are other runs' ids


def _already_decided(ask_id: int) -> AskAlreadyDecided | AskNotFound:
    """Why an ask could not be claimed: decided (by whom, when) or superseded."""
    ask = Ask.objects.filter(pk=ask_id).first()
    if ask is None:
        return AskNotFound("No such ask.")  # deleted (with its project) since it was looked up
    if ask.status == Ask.Status.SUPERSEDED:
        return AskSuperseded.of(session_id=ask.session_id, superseded_by=ask.superseded_by_id)
    when = ask.decided_at.isoformat() if ask.decided_at else "earlier"
    if ask.decided_via == Ask.Via.DEADLINE:
        message = (
            f"This ask's deadline ({ask.deadline:%Y-%m-%d %H:%M:%S} UTC) passed, so it was "
            f"{'approved' if ask.approved else 'declined'} as its onTimeout says, at {when}; "
            "a decision is made once."
        )
    else:
        verdict = "answered" if ask.kind == Ask.Kind.PLAIN else ("approved" if ask.approved else "declined")
        message = f"This ask was already {verdict} by {ask.decided_by_label} at {when}; a decision is made once."
    return AskAlreadyDecided(message, decision=ask.decision())


def _deadline_decision(ask: Ask) -> dict[str, Any]:
    """The decision a passed deadline makes: the ask's onTimeout, by the deadline."""
    return {
        "approved": ask.on_timeout == Ask.OnTimeout.APPROVE,
        "via": Ask.Via.DEADLINE,
        "by_label": "deadline",
        "note": deadline_rules.deadline_note(ask)
        or f"no decision before the deadline ({ask.deadline:%Y-%m-%d %H:%M:%S} UTC)",
    }


def _decide_if_standing(ask: Ask) -> Ask | None:
    """Decide a newly opened ask at once, in the transaction that opens it, when a standing
    approval in force covers it (the decision names it): the agent's POST answers with the
    decision, and no worker, NOTIFY or poll stands between. The decided ask, or None."""
    standing = standing_approval_covering(ask=ask)
    if standing is None:
        return None
    return ask_decide(
        ask_id=ask.pk,
        opened=ask,
        approved=True,
        via=Ask.Via.STANDING,
        by_label=standing.granted_by_label,
        user=standing.granted_by,
        note=f"standing approval {standing.pk}, until {standing.expires_at:%Y-%m-%d %H:%M:%S} UTC",
        standing=standing,
    )


def ask_decide(
    *,
    ask_id: int,
    approved: bool,
    via: str,
    by_label: str,
    user: User | None = None,
    key: AgentKey | None = None,
    note: str | None = None,
    value: Any = NO_VALUE,
    standing: StandingApproval | None = None,
    opened: Ask | None = None,
) -> Ask:
    """Record the one decision of an ask.

    `by_label` is stamped by the caller from who is authenticated (a person), or is an
    integration's own name for who decided, kept beside the `key` it authenticated with.
    Writes the decision (a claim: only an open ask can be decided), appends a
    `ledger.human_decision` event to the run's chain, NOTIFYs waiting long-polls on commit,
    and enqueues the project's webhook delivery. Raises AskAlreadyDecided for a second decision
    and AskNotFound for an ask that is gone.

    The deadline is a promise: once it has passed (by the database's clock, as the deadline pass
    reads it), nobody else decides the ask. A late decision on an open ask records the ask's
    onTimeout, exactly as the pass would, and raises AskAlreadyDecided naming the deadline. The
    pass (`via` DEADLINE) decides the asks it found overdue by its own `now`.

    Who may decide is the ask's approval rule's (`approvers.decision_gate`): an approval toward a
    quorum of several people is recorded, and the ask returned still open, until the last one
    completes it; that approval's decision names them all. `standing` is the standing approval
    this decision grants (from the ask's page) or applies (via STANDING), chained with it.
    `opened` is the ask as the transaction that opened it holds it (not read again).
    """
    if opened is not None and opened.pk == ask_id:
        target: Ask | None = opened
    else:
        target = Ask.objects.select_related("project").filter(pk=ask_id).first()
    if target is None:
        raise AskNotFound("No such ask.")
    if target.status == Ask.Status.SUPERSEDED:  # refused before the run's lock, which would create its run
        raise AskSuperseded.of(session_id=target.session_id, superseded_by=target.superseded_by_id)
    if key is not None and key.pk in target.reporting_key_ids:
        raise AskOwnDecision(
            "This key opened the ask (or posted its checkpoint), so it cannot decide it: a person "
            "decides at /inbox/, or an integration with its own key (scope 'decide')."
        )
    if value is None and target.kind != Ask.Kind.PLAIN:
        value = NO_VALUE  # null is no DecisionValue: a consent gate's decision without one
    _check_decision(target, via, by_label, note, value)
    quorum_rule = decision_gate(ask=target, approved=approved, via=via, user=user, has_key=key is not None)
    late = via != Ask.Via.DEADLINE
    chained: dict[str, Any] = {}
    # The refusal is raised once this block has committed: a late decider's deadline decision
    # must not roll back with it.
    with transaction.atomic():
        # The run's lock before the ask's row, in ingestion's order (it closes asks the run reports).
        run_lock(project=target.project, run_id=target.run_id)
        in_time = (Q(deadline__isnull=True) | Q(deadline__gt=Now())) if late else Q()
        if quorum_rule is not None and user is not None:
            approvals = quorum_approval_add(
                ask_id=ask_id, rule=quorum_rule, user=user, by_label=by_label, note=note, in_time=in_time
            )
            if approvals is not None and len(approvals) < quorum_rule.quorum:
                return Ask.objects.select_related("project").get(pk=ask_id)  # recorded; the quorum waits
            if approvals is not None:
                by_label = " and ".join(a.by_label for a in approvals)
                chained["approvals"] = quorum_record(approvals)
                chained["quorum"] = {"group": quorum_rule.group.name, "of": quorum_rule.quorum}
        if standing is not None:
            chained["standingApproval"] = standing_chain_record(standing)
        decided = _decision_record(
            ask_id,
            in_time,
            approved=approved,
            via=via,
            by_label=by_label,
            user=user,
            key=key,
            note=note,
            value=value,
            standing=standing,
            chained=chained,
        )
        if decided is None and late:
            overdue = Ask.objects.filter(pk=ask_id, status=Ask.Status.OPEN, deadline__lte=Now()).first()
            if overdue is not None:
                _decision_record(ask_id, Q(), **_deadline_decision(overdue))
    if decided is None:
        raise _already_decided(ask_id)
    return decided


def _decision_record(
    ask_id: int,
    condition: Q,
    *,
    approved: bool,
    via: str,
    by_label: str,
    user: User | None = None,
    key: AgentKey | None = None,
    note: str | None = None,
    value: Any = NO_VALUE,
    standing: StandingApproval | None = None,
    chained: dict[str, Any] | None = None,
) -> Ask | None:
    """Claim the ask while it is open (and `condition` holds), chain the decision, NOTIFY it and
    queue its webhook. None when the claim fails. Runs under the run's lock."""
    claimed = Ask.objects.filter(condition, pk=ask_id, status=Ask.Status.OPEN).update(
        status=Ask.Status.DECIDED,
        approved=approved,
        decided_by_label=by_label,
        decided_by=user,
        decided_by_key=key,
        decided_at=Now(),
        decided_via=via,
        note=note or None,
        # Value(None, JSONField) is JSON null, an answer; without one the column stays SQL NULL.
        value=None if value is NO_VALUE else models.Value(value, output_field=models.JSONField()),
        answered=value is not NO_VALUE,
        standing_approval=standing,
    )
    if claimed != 1:
        return None
    # The project's webhook with it: one read for the chained payload and the outbox row.
    ask = Ask.objects.select_related("project", "project__webhook").get(pk=ask_id)
    payload: dict[str, Any] = {
        "askId": ask.pk,
        "kind": ask.kind,
        "toolCallId": ask.tool_call_id,
        "toolName": ask.tool_name,
        "via": via,
        "decision": ask.decision() or {},
    }
    if key is not None:
        payload["byKey"] = key.prefix
    payload.update(chained or {})
    run_append_server_event(project=ask.project, run_id=ask.run_id, type_=DECISION_EVENT, payload=payload)
    ask_waiters_wake(ask.pk)
    endpoint = getattr(ask.project, "webhook", None)
    if endpoint is not None and endpoint.active:
        delivery = WebhookDelivery.objects.create(ask=ask, url=endpoint.url)
        # The fast path; the outbox sweep sends whatever it misses.
        task_send_on_commit("ledger.tasks.ask_deliver_webhook", delivery.pk)
    return ask


def standing_chain_record(standing: StandingApproval) -> dict[str, Any]:
    """What the chain keeps of a standing approval: who granted it, what it covers, until when."""
    return {
        "id": standing.pk,
        "grantedBy": standing.granted_by_label,
        "toolName": standing.tool_name,
        "pattern": standing.pattern,
        "agentId": standing.agent_id,
        "expiresAt": int(standing.expires_at.timestamp() * 1000),
    }


def asks_apply_deadlines(*, now: datetime | None = None, limit: int = 500) -> int:
    """Apply `onTimeout` to open asks past their deadline (at `now`, by default the database's
    clock), recorded as decided by the deadline. Closes the asks nobody touches: a late decider
    closes its ask the same way (`ask_decide`).

    One pass at a time (a session advisory lock): passes queued behind a slow one would only
    wait on each other's row locks. A pass that finds the lock taken does nothing.
    """
    applied = 0
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext('footprint.ask-deadlines'))")
        (locked,) = cur.fetchone()  # type: ignore[misc]
    if not locked:
        return 0
    try:
        overdue = Ask.objects.filter(status=Ask.Status.OPEN, deadline__lte=Now() if now is None else now)
        for ask in overdue.order_by("deadline")[:limit]:
            try:
                ask_decide(ask_id=ask.pk, **_deadline_decision(ask))
                applied += 1
            except AskAlreadyDecided:
                continue  # decided while this pass ran: by a person in time, or a late one (as the deadline)
            except AskNotFound:
                continue  # deleted (with its project) while this pass ran
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext('footprint.ask-deadlines'))")
    return applied
