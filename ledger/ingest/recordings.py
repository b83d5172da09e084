"""Whole recordings (`agentfootprint.recording.v1`): their events stored through ingestion, the
recording kept, and its snapshot's decision values copied onto the run's decisions."""

import hashlib
from typing import Any

from django.db import transaction

from footprint_site.lib.ids import RUN_ID_RULE, is_run_id
from footprint_site.lib.jsonbody import json_holds_nul, parse_stream_json
from ledger.exceptions import RecordingInvalid
from ledger.ingest.decision_values import decision_values_attach
from ledger.ingest.envelopes import check_events
from ledger.ingest.runs import RunReceipt
from ledger.ingest.services import events_ingest
from ledger.models import Recording, Run
from tenancy.models import AgentKey, Project

RECORDING_FORMAT = "agentfootprint.recording.v1"
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
    decision_values_attach(run, envelope)
    return receipt, created
