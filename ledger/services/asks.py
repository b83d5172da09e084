"""Asks: a paused run waiting for a person, and the one decision it gets.

Exactly once: a decision is a conditional UPDATE … WHERE status = 'open'; the loser is told who
won and when. The decision is appended to the run's hash chain as a server-authored event and
announced with NOTIFY, which wakes every long-poll waiting on it at once.
"""

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ledger.envelopes import Event
from ledger.exceptions import AskAlreadyDecided, AskInvalid, AskNotFound
from ledger.models import AgentKey, Ask, Project, Run, ToolCall, WebhookDelivery
from ledger.services.ingest import run_append_server_event

NOTIFY_CHANNEL = "ask_decided"
DECISION_EVENT = "ledger.human_decision"
CONSUMER_SCOPE = "consumer-scope"


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
    if isinstance(pause_data.get("authorization"), dict):
        return {"kind": Ask.Kind.CREDENTIAL, "question": pause_data.get("question")}
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
    if not isinstance(pause_data.get("toolCallId"), str) or not pause_data["toolCallId"]:
        raise AskInvalid("pauseData.toolCallId is required: an ask is opened for one tool call.")
    return pause_data


def _fields_for_model(pause_data: dict[str, Any]) -> dict[str, Any]:
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
) -> tuple[Ask, bool]:
    """Open the ask of a paused tool call, or return the one already open for it (idempotent).

    A re-post carrying a checkpoint the first post lacked (an ask opened from events) stores it
    and binds it to this key, the only caller it is ever returned to.
    """
    data = _check_pause_data(pause_data)
    if on_timeout not in Ask.OnTimeout.values:
        raise AskInvalid("onTimeout must be 'decline' or 'approve'.")
    defaults = {
        **_fields_for_model(data),
        "session_id": session_id,
        "checkpoint": checkpoint,
        "posted_by_key": key if checkpoint is not None else None,
        "deadline": deadline,
        "on_timeout": on_timeout,
    }
    try:
        with transaction.atomic():
            return Ask.objects.create(project=project, run_id=run_id, tool_call_id=data["toolCallId"], **defaults), True
    except IntegrityError:
        pass
    ask = Ask.objects.select_for_update().get(project=project, run_id=run_id, tool_call_id=data["toolCallId"])
    if checkpoint is not None and ask.checkpoint is None:
        ask.checkpoint, ask.posted_by_key = checkpoint, key
        if deadline and not ask.deadline:
            ask.deadline, ask.on_timeout = deadline, on_timeout
        ask.save(update_fields=["checkpoint", "posted_by_key", "deadline", "on_timeout"])
    return ask, False


def _run_of_pause(project: Project, event: Event, tool_call_id: str) -> str:
    """The run that paused. 9.62.0 emits pause events under the runId 'consumer-scope', so that one
    is traced back through the tool call it paused (the latest unfinished call with its id)."""
    if event.run_id != CONSUMER_SCOPE:
        return event.run_id
    call = (
        ToolCall.objects.filter(run__project=project, tool_call_id=tool_call_id, end_seq__isnull=True)
        .select_related("run")
        .order_by("-run__id")
        .first()
    )
    return call.run.run_id if call else event.run_id


def asks_from_events(*, project: Project, events: list[Event]) -> None:
    """Open asks from ingested `pause.request` / `checkin.request` events; close them on the
    run's own `checkin.decision` (decided elsewhere). Runs inside the ingestion transaction."""
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        short = event.type.removeprefix("agentfootprint.")
        if short == "checkin.decision":
            _close_reported(project, payload)
            continue
        pause_data: Any = payload.get("questionPayload")
        if short == "checkin.request":
            pause_data = {
                "toolCallId": payload.get("toolCallId"),
                "toolName": payload.get("toolName"),
                "checkIn": payload.get("request"),
            }
        if not isinstance(pause_data, dict) or not isinstance(pause_data.get("toolCallId"), str):
            continue
        run_id = _run_of_pause(project, event, pause_data["toolCallId"])
        session_id = event.meta.get("sessionId") or (
            Run.objects.filter(project=project, run_id=run_id).values_list("session_id", flat=True).first()
        )
        existing = Ask.objects.filter(project=project, run_id=run_id, tool_call_id=pause_data["toolCallId"]).first()
        if existing is None:
            Ask.objects.create(
                project=project,
                run_id=run_id,
                tool_call_id=pause_data["toolCallId"],
                session_id=session_id,
                **_fields_for_model(pause_data),
            )
            continue
        updates: dict[str, Any] = {}
        if short == "checkin.request" and existing.kind != Ask.Kind.CHECK_IN:
            updates.update(_fields_for_model(pause_data))
        if existing.session_id is None and session_id:
            updates["session_id"] = session_id
        if updates:
            Ask.objects.filter(pk=existing.pk).update(**updates)


def _close_reported(project: Project, payload: dict[str, Any]) -> None:
    tool_call_id, by = payload.get("toolCallId"), payload.get("by")
    if not isinstance(tool_call_id, str) or not isinstance(payload.get("approved"), bool):
        return
    # The resumed run reports under a new runId and no session, so the ask is found by its tool
    # call alone; ids like 'c3' repeat across runs, and an ambiguous match decides nothing.
    candidates = list(Ask.objects.filter(project=project, tool_call_id=tool_call_id, status=Ask.Status.OPEN)[:2])
    if len(candidates) == 1:
        Ask.objects.filter(pk=candidates[0].pk, status=Ask.Status.OPEN).update(
            status=Ask.Status.DECIDED,
            approved=payload["approved"],
            decided_by_label=by if isinstance(by, str) else "",
            decided_at=timezone.now(),
            decided_via=Ask.Via.RUN,
            note=payload.get("note") if isinstance(payload.get("note"), str) else None,
        )


def _already_decided(ask_id: int) -> AskAlreadyDecided:
    ask = Ask.objects.get(pk=ask_id)
    when = ask.decided_at.isoformat() if ask.decided_at else "earlier"
    verdict = "answered" if ask.kind == Ask.Kind.PLAIN else ("approved" if ask.approved else "declined")
    return AskAlreadyDecided(
        f"This ask was already {verdict} by {ask.decided_by_label} at {when}; a decision is made once.",
        decision=ask.decision(),
    )


@transaction.atomic
def ask_decide(
    *,
    ask_id: int,
    approved: bool,
    via: str,
    by_label: str,
    user: User | None = None,
    note: str | None = None,
    value: Any = None,
) -> Ask:
    """Record the one decision of an ask.

    `by_label` is stamped by the caller from who is authenticated, never taken from a form.
    Writes the decision (a claim: only an open ask can be decided), appends a
    `ledger.human_decision` event to the run's chain, NOTIFYs waiting long-polls on commit,
    and enqueues the project's webhook delivery. Raises AskAlreadyDecided for a second decision.
    """
    claimed = Ask.objects.filter(pk=ask_id, status=Ask.Status.OPEN).update(
        status=Ask.Status.DECIDED,
        approved=approved,
        decided_by_label=by_label,
        decided_by=user,
        decided_at=timezone.now(),
        decided_via=via,
        note=note or None,
        value=value,
    )
    if claimed != 1:
        if not Ask.objects.filter(pk=ask_id).exists():
            raise AskNotFound("No such ask.")
        raise _already_decided(ask_id)
    ask = Ask.objects.select_related("project").get(pk=ask_id)
    decision = ask.decision() or {}
    run_append_server_event(
        project=ask.project,
        run_id=ask.run_id,
        type_=DECISION_EVENT,
        payload={
            "askId": ask.pk,
            "kind": ask.kind,
            "toolCallId": ask.tool_call_id,
            "toolName": ask.tool_name,
            "via": via,
            "decision": decision,
        },
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, str(ask.pk)])
    endpoint = getattr(ask.project, "webhook", None)
    if endpoint is not None and endpoint.active:
        from ledger import tasks

        delivery = WebhookDelivery.objects.create(ask=ask, url=endpoint.url)
        tasks.ask_deliver_webhook.delay_on_commit(delivery.pk)  # type: ignore[attr-defined]
    return ask


def asks_apply_deadlines(*, now: datetime | None = None, limit: int = 500) -> int:
    """Apply `onTimeout` to open asks past their deadline, recorded as decided by the deadline."""
    now = now or timezone.now()
    applied = 0
    for ask in Ask.objects.filter(status=Ask.Status.OPEN, deadline__lte=now).order_by("deadline")[:limit]:
        try:
            ask_decide(
                ask_id=ask.pk,
                approved=ask.on_timeout == Ask.OnTimeout.APPROVE,
                via=Ask.Via.DEADLINE,
                by_label="deadline",
                note=f"no decision before the deadline ({ask.deadline:%Y-%m-%d %H:%M:%S} UTC)",
            )
            applied += 1
        except AskAlreadyDecided:
            continue  # a person decided while this pass ran: theirs stands
    return applied
