"""Reads that prove a run's ledger was not edited: the chain walk and the signed anchors.

A walk re-hashes every stored record in store order. It catches an edited, inserted or removed
record, and a tail removed together with the run's own head columns as long as an anchor (a
signed checkpoint kept apart from the rows, see `ledger.audits.anchors`) saw the longer chain.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connections

from footprint_site.lib.chain import GENESIS, link_hash
from footprint_site.lib.js import js_equal
from footprint_site.lib.jsonbody import json_holds_nul
from footprint_site.replicas import lagging_reads_alias
from ledger.audits import anchors
from ledger.ingest.envelopes import canonical_bytes, replace_nul, wall_clock_ms_of
from ledger.ingest.projections import call_id_of
from ledger.models import AnchoredHead, ChainAnchor, IntegrityCheck, Run, RunTombstone
from tenancy.models import Project

# Rows per query of the walk: each chunk is its own statement, so progress can be reported
# between chunks without holding a transaction open for the whole of a long chain.
WALK_CHUNK = 5000


@dataclass
class ChainVerdict:
    valid: bool
    records_checked: int
    broken_at: int | None = None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        verdict: dict[str, Any] = {"valid": self.valid, "recordsChecked": self.records_checked}
        if not self.valid:
            verdict["brokenAt"] = self.broken_at
            verdict["reason"] = self.reason
        return verdict


def _record_problem(
    position: int,
    expected_position: int,
    prev: bytes,
    running: bytes,
    body: str,
    doc: Any,
    stored_hash: bytes,
    seq: int,
    type_: str,
    tool_call_id: str | None,
    wall_clock_ms: int | None,
) -> str | None:
    if position != expected_position:
        return f"record {expected_position} is missing: the next stored record is at position {position}"
    if prev != running:
        return f"chain broken at record {position}: its previous-hash does not match record {position - 1}"
    raw = body.encode()
    if link_hash(prev, raw) != stored_hash:
        return f"hash mismatch at record {position}: its stored bytes were edited or corrupted"
    parsed = orjson.loads(raw)
    expected = raw  # the body is canonical text: doc's canonical text is the same, unless
    if json_holds_nul(raw):  # U+0000 became U+FFFD there
        parsed = replace_nul(parsed)
        expected = canonical_bytes(parsed)
    if isinstance(doc, str):  # Django's psycopg setup hands jsonb over as text
        doc = orjson.loads(doc)
    # Not ==, which takes true for 1; jsonb writes some numbers back otherwise (1e16 as 10000000000000000).
    same = canonical_bytes(doc) == expected or js_equal(parsed, doc)
    if not same or parsed.get("seq") != seq or parsed.get("type") != type_:
        return f"record {position}'s queryable copy (doc, seq or type) no longer matches its hashed bytes"
    if _columns_of(parsed) != (tool_call_id, wall_clock_ms):
        return f"record {position}'s tool call or time column no longer matches its hashed bytes"
    return None


def _columns_of(parsed: dict[str, Any]) -> tuple[str | None, int | None]:
    """The columns ingestion derives from an event (the pages show them): its tool call and time."""
    meta = parsed.get("meta")
    wall = meta.get("wallClockMs") if isinstance(meta, dict) else None
    return call_id_of(parsed.get("payload")), None if wall is None else wall_clock_ms_of(wall)


def run_chain_verify(*, run: Run, progress: Callable[[int], None] | None = None) -> ChainVerdict:
    """Re-walk the run's chain up to the head it had when `run` was read.

    Records appended while the walk runs are left for the next check. `progress` is called with
    the number of records checked after each chunk.
    """
    total = run.chain_length
    anchored = _latest_anchored_head(run)
    anchored_hash: bytes | None = None
    running = GENESIS
    checked = 0
    with connections[lagging_reads_alias()].cursor() as cur:
        while checked < total:
            cur.execute(
                "SELECT position, prev_hash, hash, body, doc, seq, type, tool_call_id, wall_clock_ms"
                " FROM ledger_runevent WHERE run_id = %s AND period = %s AND position >= %s AND position < %s"
                " ORDER BY position LIMIT %s",
                [run.pk, run.period, checked, total, WALK_CHUNK],
            )
            rows = cur.fetchall()
            for position, prev, stored_hash, body, doc, seq, type_, tool_call_id, wall_clock_ms in rows:
                problem = _record_problem(
                    position,
                    checked,
                    bytes(prev),
                    running,
                    body,
                    doc,
                    bytes(stored_hash),
                    seq,
                    type_,
                    tool_call_id,
                    wall_clock_ms,
                )
                if problem:
                    return ChainVerdict(False, checked, checked, problem)
                running = bytes(stored_hash)
                checked += 1
                if anchored is not None and checked == anchored.chain_length:
                    anchored_hash = running
            if progress is not None:
                progress(checked)
            if len(rows) < WALK_CHUNK:
                break
    if checked != total or running != bytes(run.head_hash):
        return ChainVerdict(
            False,
            checked,
            checked,
            f"the run's recorded head covers {total} records but {checked} are stored: "
            "records were removed from the end of the chain",
        )
    stray = _record_past_head(run)
    if stray is not None:
        position, length = stray
        return ChainVerdict(
            False,
            checked,
            position,
            f"record {position} lies past the run's recorded head ({length} records): ingestion did not write it",
        )
    elsewhere = _record_outside_its_partition(run)
    if elsewhere is not None:
        position, period, run_period = elsewhere
        return ChainVerdict(
            False,
            checked,
            position,
            f"record {position} is stored under period {period}, outside the run's partition (period "
            f"{run_period}): ingestion did not write it",
        )
    if anchored is not None:
        problem = _anchor_problem(anchored, checked, anchored_hash)
        if problem:
            return ChainVerdict(False, checked, min(checked, anchored.chain_length - 1), problem)
    return ChainVerdict(True, checked)


def _record_outside_its_partition(run: Run) -> tuple[int, int, int] | None:
    """A record of the run stored under another period than the run's (ledger/partitions.py):
    the walk reads the run's own partition only, so this looks in every other one. One statement:
    retention moves a run's rows and its period in one transaction, never seen half done."""
    with connections[lagging_reads_alias()].cursor() as cur:
        cur.execute(
            "SELECT e.position, e.period, r.period FROM ledger_runevent e JOIN ledger_run r ON r.id = e.run_id"
            " WHERE e.run_id = %s AND e.period <> r.period ORDER BY e.position LIMIT 1",
            [run.pk],
        )
        row = cur.fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _record_past_head(run: Run) -> tuple[int, int] | None:
    """The first stored record at or past the run's head, with the head's length. One statement,
    so one snapshot: ingestion appends records and moves the head in one transaction, and a record
    appended since the walk began is behind the head this reads."""
    with connections[lagging_reads_alias()].cursor() as cur:
        cur.execute(
            "SELECT e.position, r.chain_length FROM ledger_runevent e JOIN ledger_run r ON r.id = e.run_id"
            " WHERE e.run_id = %s AND e.position >= r.chain_length ORDER BY e.position LIMIT 1",
            [run.pk],
        )
        row = cur.fetchone()
    return None if row is None else (row[0], row[1])


def _latest_anchored_head(run: Run) -> AnchoredHead | None:
    return (
        AnchoredHead.objects.select_related("anchor")
        .filter(project_id=run.project_id, run_id=run.run_id)
        .order_by("-chain_length", "-id")
        .first()
    )


def _anchor_problem(anchored: AnchoredHead, stored: int, stored_hash: bytes | None) -> str | None:
    anchor = anchored.anchor
    when = anchor.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    signature_problem = anchor_signature_problem(anchor)
    if signature_problem:
        return f"anchor {anchor.number} ({when}) {signature_problem}"
    if stored < anchored.chain_length:
        return (
            f"anchor {anchor.number} ({when}) saw {anchored.chain_length} records but {stored} are stored: "
            "records were removed from the end of the chain"
        )
    if stored_hash != bytes(anchored.head_hash):
        return (
            f"record {anchored.chain_length - 1} is not the head anchor {anchor.number} ({when}) signed: "
            "the chain was rewritten after it was anchored"
        )
    return None


def anchor_signature_problem(anchor: ChainAnchor) -> str | None:
    """Why the anchor no longer vouches for the heads stored under it (after "anchor N"), or None."""
    heads = [
        (run_id, length, bytes(head))
        for run_id, length, head in AnchoredHead.objects.filter(anchor=anchor).values_list(
            "run_id", "chain_length", "head_hash"
        )
    ]
    digest = anchors.anchor_digest(
        project_slug=anchor.project.slug,
        number=anchor.number,
        prev_digest=bytes(anchor.prev_digest),
        heads=heads,
        digest_format=anchor.digest_format,
    )
    if digest != bytes(anchor.digest) or not anchors.signature_matches(digest, bytes(anchor.signature)):
        return "no longer matches its signature: the anchors were edited"
    if anchors.heads_ambiguous(heads, anchor.digest_format):
        return (
            "cannot vouch for its heads: it was signed in format 1, whose text a run id holding a tab or "
            "newline can make cover other heads"
        )
    return None


def integrity_check_latest(*, run: Run) -> IntegrityCheck | None:
    return IntegrityCheck.objects.filter(run=run).select_related("requested_by").order_by("-id").first()


def integrity_check_get(*, run: Run, check_id: int) -> IntegrityCheck | None:
    return IntegrityCheck.objects.filter(run=run, pk=check_id).select_related("requested_by").first()


@dataclass
class AnchorAudit:
    """A project's anchors checked as a whole: their own chain, and every run they vouch for."""

    anchors: int
    runs_vouched: int
    problems: list[str]
    latest: ChainAnchor | None

    @property
    def valid(self) -> bool:
        return not self.problems


def project_anchors_audit(*, project: Project, limit: int = 200) -> AnchorAudit:
    """Walk the project's anchors in order (numbers contiguous, each chained to the one before,
    every signature holding) and check that every run an anchor saw still exists with at least
    the records it saw. A whole run deleted, which no run page can show, is found here.

    Reports at most `limit` problems; the latest head of each run is what is compared.
    """
    problems: list[str] = []
    previous_digest = GENESIS
    anchors = list(ChainAnchor.objects.filter(project=project).order_by("number"))
    for expected, anchor in enumerate(anchors, start=1):
        if anchor.number != expected:
            problems.append(f"anchor {expected} is missing: the next one stored is anchor {anchor.number}")
        elif bytes(anchor.prev_digest) != previous_digest:
            problems.append(f"anchor {anchor.number} does not chain to anchor {expected - 1}")
        signature_problem = anchor_signature_problem(anchor)
        if signature_problem:
            problems.append(f"anchor {anchor.number} {signature_problem}")
        previous_digest = bytes(anchor.digest)
    latest_heads = (
        AnchoredHead.objects.filter(project=project)
        .order_by("run_id", "-chain_length")
        .distinct("run_id")
        .values_list("run_id", "chain_length")
    )
    stored = dict(Run.objects.filter(project=project).values_list("run_id", "chain_length"))
    # What retention removed, with the record count it removed: the run's latest stone.
    removed = dict(
        RunTombstone.objects.filter(project=project)
        .order_by("run_id", "-removed_at", "-pk")
        .distinct("run_id")
        .values_list("run_id", "chain_length")
    )
    vouched = 0
    for run_id, length in latest_heads.iterator():
        vouched += 1
        if run_id not in stored:
            if run_id not in removed:
                problems.append(
                    f"run '{run_id}' was anchored with {length} records and no longer exists, and retention "
                    "did not remove it: it was deleted behind the server's back"
                )
            elif removed[run_id] < length:
                problems.append(
                    f"run '{run_id}' was anchored with {length} records, but retention removed it with "
                    f"{removed[run_id]}: records were deleted before it was archived"
                )
        elif stored[run_id] < length:
            problems.append(f"run '{run_id}' was anchored with {length} records and now has {stored[run_id]}")
        if len(problems) >= limit:
            break
    return AnchorAudit(len(anchors), vouched, problems[:limit], anchors[-1] if anchors else None)
