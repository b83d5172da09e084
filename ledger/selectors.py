"""Reads. Every selector takes the project (or the user) it answers for and never leaks past it."""

import base64
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from artifacts.models import Artifact
from artifacts.selectors import ArtifactView, artifact_shown, artifacts_referenced, payload_preview
from footprint_site.notify import ask_decisions, ask_wait_slots
from ledger import audit
from ledger.exceptions import AskNotFound, RunNotFound
from ledger.models import AgentKey, Ask, Membership, Project, Run, RunEvent, RunSearchChunk, ToolCall
from ledger.services.tenancy import hash_secret


def agent_key_get_by_secret(*, secret: str) -> AgentKey | None:
    return (
        AgentKey.objects.select_related("project")
        .filter(secret_hash=hash_secret(secret), revoked_at__isnull=True)
        .first()
    )


def encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """An undecodable cursor restarts the listing rather than failing it."""
    if not cursor:
        return None
    try:
        return int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except ValueError:
        return None


# Full-text search: runs whose stored events hold every word, each event searched in its first
# SEARCHED_CHARS characters. Word by word, since the worker's chunks hold up to 50 records' text:
# "every word in one event" would change once a chunk joined two events, and "in one chunk" would
# depend on where chunks happen to end. Two parts per word: the chunks (GIN index), and the records
# ingested since the worker's last pass, read directly. Those are few and are found first, on
# their own: folded into one statement, PostgreSQL could not estimate how few (chain_length >
# search_indexed) and planned for a third of all runs, and a search of a word in every run took
# 300 ms instead of 0.3.
MAX_SEARCH_CHARS = 200  # a search's words are looked up one by one
_SEARCH_WORDS = "SELECT DISTINCT lexeme FROM unnest(to_tsvector('simple', %s)) ORDER BY lexeme"
_RUNS_MATCHING_IN_CHUNKS = (
    "SELECT c.run_id FROM ledger_runsearchchunk c WHERE c.document @@ plainto_tsquery('simple', %s)"
)
# LATERAL: start from the pending runs (the partial index), never from all events.
_PENDING_RUNS_MATCHING = """
    SELECT r.id FROM ledger_run r
    CROSS JOIN LATERAL (
        SELECT 1 FROM ledger_runevent e
        WHERE e.run_id = r.id AND e.position >= r.search_indexed
            AND to_tsvector('simple', left(e.body, %s)) @@ plainto_tsquery('simple', %s)
        LIMIT 1
    ) AS unindexed_match
    WHERE r.chain_length > r.search_indexed AND r.project_id = ANY(%s)
"""


def _runs_matching_text(runs: QuerySet[Run], text: str, project_ids: list[int]) -> QuerySet[Run]:
    with connection.cursor() as cur:
        cur.execute(_SEARCH_WORDS, [text])
        words = [word for (word,) in cur.fetchall()]
        if not words:
            return runs.none()
        for word in words:
            cur.execute(_PENDING_RUNS_MATCHING, [RunSearchChunk.SEARCHED_CHARS, word, project_ids])
            pending = [run_pk for (run_pk,) in cur.fetchall()]
            # A constant statement; the word travels as a parameter.
            in_chunks = Q(pk__in=RawSQL(_RUNS_MATCHING_IN_CHUNKS, [word]))  # noqa: S611
            runs = runs.filter(in_chunks | Q(pk__in=pending) if pending else in_chunks)
    return runs


@dataclass(frozen=True)
class RunFilter:
    """The run list's filters; every one optional. `text` is PostgreSQL full-text search (the
    'simple' configuration, so identifiers and ids match as written) over the runs' stored events."""

    project: str | None = None
    session: str | None = None
    status: str | None = None
    agent: str | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    has_refusals: bool = False
    has_open_asks: bool = False
    text: str | None = None


def run_list(
    *,
    projects: QuerySet[Project] | list[Project],
    filters: RunFilter | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[Run]:
    """Runs of the given projects, newest first, keyset-paged by id (`before_id`).

    The time range applies to the run's first event. Returns up to `limit + 1` rows so the caller
    can tell whether another page exists.
    """
    f = filters or RunFilter()
    runs = Run.objects.filter(project__in=projects).select_related("project")
    for value, lookup in (
        (f.project, "project__slug"),
        (f.session, "session_id"),
        (f.status, "status"),
        (f.agent, "agent_id"),
        (f.since, "first_event_at__gte"),
        (f.until, "first_event_at__lt"),
    ):
        if value:
            runs = runs.filter(**{lookup: value})
    if f.tool:
        runs = runs.filter(Exists(ToolCall.objects.filter(run_id=OuterRef("pk"), tool_name=f.tool)))
    if f.has_refusals:
        runs = runs.filter(refusal_count__gt=0)
    if f.has_open_asks:
        open_asks = Ask.objects.filter(
            project_id=OuterRef("project_id"), run_id=OuterRef("run_id"), status=Ask.Status.OPEN
        )
        runs = runs.filter(Exists(open_asks))
    if f.text:
        runs = _runs_matching_text(runs, f.text, [project.pk for project in projects])
    if before_id is not None:
        runs = runs.filter(id__lt=before_id)
    return list(runs.order_by("-id")[: limit + 1])


def run_get(*, project: Project, run_id: str) -> Run:
    # No run id holds U+0000 (ingestion refuses it), and PostgreSQL could not be asked about one.
    run = (
        None
        if "\x00" in run_id
        else Run.objects.select_related("project").filter(project=project, run_id=run_id).first()
    )
    if run is None:
        raise RunNotFound(f"No run '{run_id}' in this project.")
    return run


def run_events_page(*, run: Run, after_seq: int = -1, limit: int = 100) -> list[RunEvent]:
    """Up to `limit + 1` events of the run after `after_seq`, in seq order, with their stored body."""
    return list(
        RunEvent.objects.filter(run=run, seq__gt=after_seq)
        .order_by("seq")
        .only("seq", "position", "type", "tool_call_id", "body", "wall_clock_ms", "hash", "run_id")[: limit + 1]
    )


def projects_for_user(user: User | AnonymousUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def project_get_for_user(*, user: User | AnonymousUser, slug: str) -> tuple[Project, str] | None:
    """The project and the user's role in it, or None when the user may not see it (a 404)."""
    project = projects_for_user(user).filter(slug=slug).first()
    if project is None:
        return None
    role = role_of(user=user, project=project)
    return (project, role) if role else None


def run_get_for_user(*, user: User | AnonymousUser, project_slug: str, run_id: str) -> Run:
    run = (
        None
        if "\x00" in run_id + project_slug
        else Run.objects.select_related("project")
        .filter(project__in=projects_for_user(user), project__slug=project_slug, run_id=run_id)
        .first()
    )
    if run is None:
        raise RunNotFound(f"No run '{run_id}' in project '{project_slug}'.")
    return run


def role_of(*, user: User | AnonymousUser, project: Project) -> str | None:
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Membership.Role.ADMIN
    return Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()


# --- asks --------------------------------------------------------------------------------------

ASK_WAIT_MAX_SECONDS = 55


def ask_get(*, project: Project, ask_id: int) -> Ask:
    ask = Ask.objects.filter(project=project, pk=ask_id).defer("checkpoint").first()
    if ask is None:
        raise AskNotFound(f"No ask {ask_id} in this project.")
    return ask


DECISION_FIELDS = (
    "status", "approved", "decided_by_label", "decided_at", "decided_via", "note", "value", "answered", "kind",
    "superseded_by",
)  # fmt: skip


def ask_wait_for_decision(*, ask: Ask, wait_seconds: float) -> Ask:
    """Return as soon as the ask is closed (decided or superseded), or when the wait ends. Woken by
    NOTIFY, not by polling. WaitsFull when this process holds all the waits it may."""
    if ask.status != Ask.Status.OPEN or wait_seconds <= 0:
        return ask
    with ask_wait_slots.held():
        return _wait(ask, wait_seconds)


def _wait(ask: Ask, wait_seconds: float) -> Ask:
    key = str(ask.pk)
    woken = ask_decisions.register(key)
    try:
        ask.refresh_from_db(fields=DECISION_FIELDS)  # registered first: a decision from here on wakes us
        deadline = time.monotonic() + min(wait_seconds, ASK_WAIT_MAX_SECONDS)
        while ask.status == Ask.Status.OPEN:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            woken.wait(remaining)
            woken.clear()
            ask.refresh_from_db(fields=DECISION_FIELDS)
    finally:
        ask_decisions.unregister(key, woken)
    return ask


def approver_projects(user: User | AnonymousUser) -> QuerySet[Project]:
    """Projects whose asks this user may decide: approvers and admins (superusers: all)."""
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(
        memberships__user=user, memberships__role__in=[Membership.Role.APPROVER, Membership.Role.ADMIN]
    )


# Open and not past its deadline: an overdue ask waits for nobody, since only the deadline decides
# it (`ask_decide`); the database's clock, as the deadline pass reads it.
_WAITING_FOR_A_PERSON = Q(status=Ask.Status.OPEN) & (Q(deadline__isnull=True) | Q(deadline__gt=Now()))


def inbox_open_asks(*, user: User | AnonymousUser, before_id: int | None = None, limit: int = 25) -> list[Ask]:
    """Asks waiting for a decision in the user's approver projects, newest first, keyset-paged; up to
    limit + 1 rows."""
    # Project ids first: with a literal list the planner walks the inbox index and stops at the page.
    project_ids = list(approver_projects(user).values_list("id", flat=True))
    asks = Ask.objects.filter(_WAITING_FOR_A_PERSON, project_id__in=project_ids).select_related("project")
    if before_id is not None:
        asks = asks.filter(pk__lt=before_id)
    return list(asks.defer("checkpoint", "pause_data", "check_in").order_by("-pk")[: limit + 1])


@dataclass(frozen=True)
class AskFilter:
    # `open`: waiting for a decision, as the inbox lists them (past its deadline, an open ask is
    # the deadline pass's to decide); `decided` and `superseded` as stored.
    status: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    kind: str | None = None


def ask_list(*, project: Project, filters: AskFilter, before_id: int | None = None, limit: int = 50) -> list[Ask]:
    """The project's asks, newest first, keyset-paged; up to limit + 1 rows, without checkpoints."""
    asks = Ask.objects.filter(project=project)
    if filters.status == Ask.Status.OPEN:
        asks = asks.filter(_WAITING_FOR_A_PERSON)
    elif filters.status is not None:
        asks = asks.filter(status=filters.status)
    for field, value in (("run_id", filters.run_id), ("session_id", filters.session_id), ("kind", filters.kind)):
        if value is not None:
            asks = asks.filter(**{field: value})
    if before_id is not None:
        asks = asks.filter(pk__lt=before_id)
    return list(asks.defer("checkpoint", "pause_data", "check_in").order_by("-pk")[: limit + 1])


INBOX_COUNT_CAP = 100


def inbox_count(*, user: User | AnonymousUser) -> int:
    """Asks waiting for the user's decision, counted up to INBOX_COUNT_CAP (the badge shows "99+" beyond)."""
    waiting = Ask.objects.filter(_WAITING_FOR_A_PERSON, project__in=approver_projects(user))
    return waiting.values("id")[:INBOX_COUNT_CAP].count()


def ask_get_for_user(*, user: User | AnonymousUser, ask_id: int) -> tuple[Ask, str]:
    """The ask and the user's role in its project (auditors read, approvers decide), else 404."""
    ask = (
        Ask.objects.select_related("project", "decided_by", "superseded_by")
        .defer("checkpoint", "superseded_by__checkpoint")
        .filter(pk=ask_id, project__in=projects_for_user(user))
        .first()
    )
    role = role_of(user=user, project=ask.project) if ask else None
    if ask is None or role is None:
        raise AskNotFound("No such ask.")
    return ask, role


REF_IN_TEXT = re.compile(r"art_[A-Za-z0-9]{22}")
PRECEDING_STEPS = 15


def _refs_in(value: Any) -> list[str]:
    return sorted(set(REF_IN_TEXT.findall(orjson.dumps(value).decode()))) if value is not None else []


MAX_PREVIEWED_REFS = 5
ASK_PREVIEW_BYTES = 4 * 1024
ASK_PREVIEW_MAX_PAYLOAD = 1024 * 1024


@dataclass(frozen=True)
class ReferencedArtifact:
    """An artifact the ask's arguments or component reference: what the person decides on. The
    first MAX_PREVIEWED_REFS of at most ASK_PREVIEW_MAX_PAYLOAD bytes come with their payload
    (`shown`), the rest as a link."""

    artifact: Artifact
    shown: ArtifactView | None

    @property
    def preview(self) -> dict[str, Any] | None:
        return payload_preview(self.shown, ASK_PREVIEW_BYTES) if self.shown else None


def ask_context(*, ask: Ask) -> dict[str, Any]:
    """Everything a person needs to decide, gathered from the run (never the checkpoint itself)."""

    run = Run.objects.filter(project=ask.project, run_id=ask.run_id).first()
    call = (
        ToolCall.objects.with_args_and_result().filter(run=run, tool_call_id=ask.tool_call_id).first() if run else None
    )
    original_args = call.args if call else None
    args: Any = None
    if ask.check_in and isinstance(ask.check_in.get("args"), dict):
        args = ask.check_in["args"]
    elif ask.checkpoint is not None:
        # A checkpoint is opaque to the server (the framework's own fixtures carry a string): read
        # the paused args only from the shape that has them.
        checkpoint = orjson.loads(bytes(ask.checkpoint))
        state = checkpoint.get("sharedState") if isinstance(checkpoint, dict) else None
        args = state.get("pausedAskArgs") if isinstance(state, dict) else None
    if args is None:
        args = original_args
    steps: list[RunEvent] = []
    if run is not None:
        before = call.start_seq if call and call.start_seq is not None else run.max_seq + 1
        steps = list(
            RunEvent.objects.filter(run=run, seq__lt=before)
            .order_by("-seq")
            .only("seq", "type", "body")[:PRECEDING_STEPS]
        )[::-1]
    component = ask.component if isinstance(ask.component, dict) else None
    refs = sorted({*_refs_in(args), *_refs_in(component)})
    referenced = artifacts_referenced(project=ask.project, refs=refs) if refs else []
    # A preview is shown only once the whole payload matched its digest: reading and hashing
    # five 16 MiB payloads on every view of the page is past what a preview is worth.
    previewed = [a for a in referenced if a.bytes <= ASK_PREVIEW_MAX_PAYLOAD][:MAX_PREVIEWED_REFS]
    artifacts = [ReferencedArtifact(a, artifact_shown(a) if a in previewed else None) for a in referenced]
    history = list(
        Ask.objects.filter(project=ask.project, tool_name=ask.tool_name, status=Ask.Status.DECIDED)
        .exclude(pk=ask.pk)
        .defer("checkpoint", "pause_data", "check_in")
        .order_by("-decided_at")[:10]
    )
    return {
        "run": run,
        "args": args,
        "original_args": original_args,
        "args_differ": original_args is not None and args is not None and args != original_args,
        "steps": steps,
        "artifacts": artifacts,
        "history": history,
        "component": component,
    }


def run_audit_bundle(*, run: Run) -> dict[str, Any]:
    """The run's ledger as an `agentfootprint.audit/1` bundle (payloads verbatim) that the
    framework's `verifyAuditBundle` accepts: a genesis record, then every stored event in store
    order, server-authored decisions included."""
    events = RunEvent.objects.filter(run=run).order_by("position").values_list("body", "received_at")
    records: list[dict[str, Any]] = []
    for body, received_at in events.iterator(chunk_size=2000):
        event = orjson.loads(body)
        meta = dict(event.get("meta") or {})
        wall = meta.pop("wallClockMs", None)
        record: dict[str, Any] = {
            "timestamp": wall if isinstance(wall, int | float) else int(received_at.timestamp() * 1000),
            "eventType": event.get("type"),
        }
        if "payload" in event:
            record["payload"] = event["payload"]
        record["meta"] = {**meta, "runId": run.run_id}
        records.append(record)
    genesis = {
        "timestamp": records[0]["timestamp"] if records else int(time.time() * 1000),
        "eventType": "audit.genesis",
        "payload": {"runId": run.run_id, "library": audit.LIBRARY, "payloadMode": "verbatim"},
        "meta": {"runId": run.run_id},
    }
    return audit.build_bundle([genesis, *records], exported_at=int(time.time() * 1000))
