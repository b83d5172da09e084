"""Reads. Every selector takes the project (or the user) it answers for and never leaks past it."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AnonymousUser, User
from django.db import connections
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from footprint_site.pagination import Page, keyset_page
from footprint_site.replicas import lagging_reads_alias
from ledger.exceptions import RunNotFound
from ledger.models import Ask, Run, RunEvent, RunSearchChunk, ToolCall
from tenancy.models import Project
from tenancy.selectors import projects_for_user

# Full-text search: runs whose stored events hold every word (each event's first SEARCHED_CHARS
# characters), word by word, since a worker's chunk joins several events. Two parts per word: the
# chunks (GIN index), and the records ingested since the worker's last pass, read first and on
# their own: folded into one statement, PostgreSQL cannot tell how few they are (bench/HISTORY.md).
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
        WHERE e.run_id = r.id AND e.period = r.period AND e.position >= r.search_indexed
            AND to_tsvector('simple', left(e.body, %s)) @@ plainto_tsquery('simple', %s)
        LIMIT 1
    ) AS unindexed_match
    WHERE r.chain_length > r.search_indexed AND r.project_id = ANY(%s)
"""


def _runs_matching_text(runs: QuerySet[Run], text: str, project_ids: list[int]) -> QuerySet[Run]:
    with connections[lagging_reads_alias()].cursor() as cur:
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
    # The run's last event (for an ended run, the event that ended it), as the overview's
    # "runs ended" chart counts it.
    ended_since: datetime | None = None
    ended_until: datetime | None = None
    # When the server stored the run's events (its first and latest writes): the runs behind the
    # overview's "events stored" columns, and perhaps a run that stored nothing in between.
    stored_since: datetime | None = None
    stored_until: datetime | None = None
    has_refusals: bool = False
    has_open_asks: bool = False
    text: str | None = None
    tool_failed: bool = False  # with `tool`: only runs where a call of it failed


def run_list(
    *,
    projects: QuerySet[Project] | list[Project],
    filters: RunFilter | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[Run]:
    """A page of runs of the given projects, newest first, keyset-paged by id.

    `since`/`until` apply to the run's first event, `ended_since`/`ended_until` to its last,
    `stored_since`/`stored_until` to when the server stored its events.
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
        (f.ended_since, "last_event_at__gte"),
        (f.ended_until, "last_event_at__lt"),
        (f.stored_since, "updated_at__gte"),
        (f.stored_until, "created_at__lt"),
    ):
        if value:
            runs = runs.filter(**{lookup: value})
    if f.tool:
        calls = ToolCall.objects.filter(run_id=OuterRef("pk"), period=OuterRef("period"), tool_name=f.tool)
        runs = runs.filter(Exists(calls.filter(error=True) if f.tool_failed else calls))
    if f.has_refusals:
        runs = runs.filter(refusal_count__gt=0)
    if f.has_open_asks:
        open_asks = Ask.objects.filter(
            project_id=OuterRef("project_id"), run_id=OuterRef("run_id"), status=Ask.Status.OPEN
        )
        runs = runs.filter(Exists(open_asks))
    if f.text:
        runs = _runs_matching_text(runs, f.text, [project.pk for project in projects])
    return keyset_page(runs, order="-id", cursor=cursor, limit=limit)


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


# The server's own records (a person's decision, seq NULL), each with the seq of the agent's event
# chained just before it (-1 when none is): listed right after that event. Few per run, found
# through the (run, seq) index, which holds the NULLs.
_SERVER_RECORDS_SQL = """
SELECT e.position, COALESCE(prior.seq, -1) FROM ledger_runevent e
LEFT JOIN LATERAL (
    SELECT p.seq FROM ledger_runevent p
    WHERE p.run_id = e.run_id AND p.period = e.period AND p.position < e.position AND p.seq IS NOT NULL
    ORDER BY p.position DESC LIMIT 1
) prior ON true
WHERE e.run_id = %(run)s AND e.period = %(period)s AND e.seq IS NULL
"""


def run_server_records_following(*, run: Run, after_seq: int, upto_seq: int | None) -> dict[int, int]:
    """The server's own records listed on a page of the run's events after `after_seq` (up to
    `upto_seq`, the page's last, when another page follows): position → the seq of the agent's event
    chained before it (-1 when none is, listed on the first page)."""
    if run.chain_length == run.event_count:  # no server records: the common case asks nothing
        return {}
    with connections[lagging_reads_alias()].cursor() as cursor:
        cursor.execute(_SERVER_RECORDS_SQL, {"run": run.pk, "period": run.period})
        return {
            position: prior
            for position, prior in cursor.fetchall()
            if (prior > after_seq or (prior == -1 and after_seq < 0)) and (upto_seq is None or prior <= upto_seq)
        }


def run_events_page(*, run: Run, after_seq: int = -1, limit: int = 100) -> Page[RunEvent]:
    """A page of the run's records after `after_seq`, in seq order, with their stored body: the
    agent's events, and the server's own records (no seq; `meta.author` names the server), each
    right after the agent's event chained before it, so the pages hold every record the chain
    counts. The page ends with an agent's event and the server's records that follow it."""
    fields = ("seq", "position", "type", "tool_call_id", "body", "wall_clock_ms", "hash", "run_id")
    # With the run's period the planner reads its one partition, not an index of every month's.
    of_run = RunEvent.objects.of_run(run).only(*fields)
    page = keyset_page(of_run, order="seq", after=after_seq, limit=limit)
    follows = run_server_records_following(run=run, after_seq=after_seq, upto_seq=page.next_after)
    if not follows:
        return page
    server = of_run.filter(position__in=follows)
    rows = [((e.seq, 0, e.position), e) for e in page.items]
    rows += [((follows[e.position], 1, e.position), e) for e in server]
    return Page([e for _, e in sorted(rows, key=lambda row: row[0])], page.next_after)


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


# --- asks --------------------------------------------------------------------------------------
