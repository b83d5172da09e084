import hashlib
from typing import Any

from django.db import models, transaction

from ledger.envelopes import RUN_ID_RULE, check_events, is_run_id, json_holds_nul, parse_stream_json, replace_nul
from ledger.exceptions import RecordingInvalid
from ledger.models import AgentKey, MiddlewareDecision, Project, Recording, Run
from ledger.services.ingest import RunReceipt, events_ingest

RECORDING_FORMAT = "agentfootprint.recording.v1"
DECISION_KEYS = ("middleware", "moment", "toolCallId", "iteration", "outcome")
MAX_DROPPED_EVENTS = 2**31 - 1  # the column is an int4, as every seq is


def _events_of(envelope: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    run = envelope.get("run")
    recording = envelope.get("recording")
    if not isinstance(run, dict) or not is_run_id(run.get("runId")):
        raise RecordingInvalid(
            "run.runId is required: the recording envelope names the run it holds. " + RUN_ID_RULE.removeprefix("meta.")
        )
    if not isinstance(recording, dict) or not isinstance(recording.get("events"), list):
        raise RecordingInvalid("recording.events must be an array of the run's typed events.")
    run_id = run["runId"]
    first_index = run.get("firstRetainedEventIndex", 0)
    if not isinstance(first_index, int) or isinstance(first_index, bool) or first_index < 0:
        raise RecordingInvalid("run.firstRetainedEventIndex must be a non-negative integer.")
    numbered = []
    for index, raw in enumerate(recording["events"]):
        if not isinstance(raw, dict) or "seq" in raw:
            raise RecordingInvalid(
                f"recording.events[{index}] must be an event {{type, payload, meta}} without seq: the "
                "server numbers a recording's events from run.firstRetainedEventIndex."
            )
        meta = raw.get("meta")
        if isinstance(meta, dict) and meta.get("runId") != run_id:
            raise RecordingInvalid(
                f"recording.events[{index}] belongs to run '{meta.get('runId')}', not to the "
                f"recording's run '{run_id}'."
            )
        numbered.append({"seq": first_index + index, **raw})
    return run_id, numbered


MAX_RESUMED_RUNS = 20  # how far back a snapshot's ledger is matched along the runs it resumes


def _runs_linked_by_resumes(run: Run, *, later: bool) -> list[Run]:
    """The runs `run` resumes (or, `later`, the runs resuming it), directly or through other
    resumes, in the order they were stored (the refusal tracer's pairing: same session, no guess).
    A resume carries the whole ledger on (spec §1.7): a resuming run's snapshot holds the
    decisions of the runs it resumes too."""
    from ledger.selectors_run_page import run_resume_links  # the selectors import the services

    chain: list[Run] = []
    frontier = [run]
    while frontier and len(chain) < MAX_RESUMED_RUNS:
        linked = [link.run for other in frontier for link in run_resume_links(run=other) if link.resumed_this == later]
        frontier = [found for found in dict.fromkeys(linked) if found not in chain and found != run]
        chain += frontier
    return sorted(chain[:MAX_RESUMED_RUNS], key=lambda r: r.pk)


def _attach_decision_values(run: Run, envelope: dict[str, Any]) -> None:
    """Copy each snapshot ledger row's `before`/`after` onto the decision its event projected:
    the run's own, or one of a run it resumes (its ledger carries theirs, earliest first)."""
    snapshot = envelope["recording"].get("snapshot")
    state = snapshot.get("sharedState") if isinstance(snapshot, dict) else None
    rows = state.get("middlewareDecisions") if isinstance(state, dict) else None
    if not isinstance(rows, list):
        return
    owners = [*_runs_linked_by_resumes(run, later=False), run]
    # Flagged before matching: a decision of theirs projected later (a late batch) is matched then.
    Run.objects.filter(pk__in=[owner.pk for owner in owners], has_recording=False).update(has_recording=True)
    order = {owner.pk: index for index, owner in enumerate(owners)}
    decisions = sorted(MiddlewareDecision.objects.filter(run_id__in=order), key=lambda d: (order[d.run_id], d.seq))
    claimed: set[int] = set()
    for row in rows:
        if not isinstance(row, dict) or ("before" not in row and "after" not in row):
            continue
        for decision in decisions:
            if decision.pk in claimed:
                continue
            own = (
                decision.middleware,
                decision.moment,
                decision.tool_call_id,
                decision.iteration,
                decision.outcome,
            )
            if own == tuple(row.get(k) for k in DECISION_KEYS):
                claimed.add(decision.pk)
                # Value(None, JSONField) stores JSON null; a missing key stays SQL NULL.
                MiddlewareDecision.objects.filter(pk=decision.pk).update(
                    **{
                        key: models.Value(replace_nul(row[key]), output_field=models.JSONField())
                        for key in ("before", "after")
                        if key in row
                    }
                )
                break


def recording_values_attach(*, run_pks: list[int]) -> None:
    """Give decisions projected after a recording arrived (a late batch) the before/after values
    its snapshot holds, as when the recording came last: the recordings of the run itself and of
    the runs resuming it, whose snapshots carry its ledger on."""
    runs = [*Run.objects.filter(pk__in=run_pks)]
    covering = {*run_pks, *(later.pk for run in runs for later in _runs_linked_by_resumes(run, later=True))}
    for recording in Recording.objects.filter(run_id__in=covering).select_related("run").order_by("id"):
        _attach_decision_values(recording.run, parse_stream_json(bytes(recording.body)))


def _dropped_events(run_info: dict[str, Any]) -> int:
    dropped = run_info.get("droppedEvents", 0)
    if dropped is None:
        return 0
    if not isinstance(dropped, int) or isinstance(dropped, bool) or not 0 <= dropped <= MAX_DROPPED_EVENTS:
        raise RecordingInvalid(f"run.droppedEvents must be a whole number from 0 to {MAX_DROPPED_EVENTS}.")
    return dropped


@transaction.atomic
def recording_ingest(*, project: Project, body: bytes, key: AgentKey | None = None) -> tuple[RunReceipt, bool]:
    """Store an `agentfootprint.recording.v1` envelope byte for byte and ingest its events.

    Idempotent per run: the events go through `events_ingest` (numbered from
    firstRetainedEventIndex) and the envelope is kept once per distinct body. Decision rows gain
    the snapshot's before/after values. `key`, the agent key that posted it, opens the asks its
    pauses open. Returns the run's receipt and whether the body was new.
    """
    envelope = parse_stream_json(body)
    if not isinstance(envelope, dict):
        raise RecordingInvalid("A recording is a JSON object with format, run and recording.")
    if envelope.get("format") != RECORDING_FORMAT:
        raise RecordingInvalid(
            f"Unknown recording format {envelope.get('format')!r}; this server reads {RECORDING_FORMAT}."
        )
    run_id, raw_events = _events_of(envelope)
    if not raw_events:
        raise RecordingInvalid("recording.events is empty: there is nothing to store.")
    dropped_events = _dropped_events(envelope["run"])
    events = check_events(raw_events, may_hold_nul=json_holds_nul(body))
    (receipt,) = events_ingest(project=project, events=events, source=Run.Source.RECORDING, key=key)
    run = Run.objects.get(project=project, run_id=run_id)
    run_info = envelope["run"]
    _, created = Recording.objects.get_or_create(
        run=run,
        sha256=hashlib.sha256(body).digest(),
        defaults={
            "body": body,
            "complete": run_info.get("complete") if isinstance(run_info.get("complete"), bool) else None,
            "dropped_events": dropped_events,
        },
    )
    # Also when the body is already stored: a run linked by a resume since (its paused call's
    # start arrived late) gets the values its ledger rows hold now.
    _attach_decision_values(run, envelope)
    return receipt, created
