"""A recording's snapshot carries each middleware decision's `before`/`after`, which the decision
events leave out: copied onto the decisions ingestion projected, the run's own and those of the
runs it resumes, whichever of the recording and the events arrived first."""

from typing import Any

from django.db import models

from footprint_site.lib.jsonbody import parse_stream_json
from ledger.explorer.run_page import run_resume_links
from ledger.ingest.envelopes import replace_nul
from ledger.models import MiddlewareDecision, Recording, Run

DECISION_KEYS = ("middleware", "moment", "toolCallId", "iteration", "outcome")
MAX_RESUMED_RUNS = 20  # how far back a snapshot's ledger is matched along the runs it resumes


def _runs_linked_by_resumes(run: Run, *, later: bool) -> list[Run]:
    """The runs `run` resumes (or, `later`, the runs resuming it), directly or through other
    resumes, in the order they were stored (the refusal tracer's pairing: same session, no guess).
    A resume carries the whole ledger on (spec §1.7): a resuming run's snapshot holds the
    decisions of the runs it resumes too."""

    chain: list[Run] = []
    frontier = [run]
    while frontier and len(chain) < MAX_RESUMED_RUNS:
        linked = [link.run for other in frontier for link in run_resume_links(run=other) if link.resumed_this == later]
        frontier = [found for found in dict.fromkeys(linked) if found not in chain and found != run]
        chain += frontier
    return sorted(chain[:MAX_RESUMED_RUNS], key=lambda r: r.pk)


def decision_values_attach(run: Run, envelope: dict[str, Any]) -> None:
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
        decision_values_attach(recording.run, parse_stream_json(bytes(recording.body)))
