"""Runs, their hash-chained events and the projections.

Ledger rows (`RunEvent`) are append-only: no service updates or deletes them. Projection rows are
derived from events and may be enriched (a recording adds `before`/`after` to decisions), never
used as the evidence of record.
"""

from typing import Any, Self, TypeVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from footprint_site.lib.jsonb import JsonbDecoder
from ledger.otlp.wire import span_json
from tenancy.models import AgentKey, Project


class Run(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        FAILED = "failed"
        HALTED = "halted"
        DENIED = "denied"  # a message middleware refused the input or the answer (spec §1.6)

    class Source(models.TextChoices):
        EVENTS = "events"
        RECORDING = "recording"
        OTLP = "otlp"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    session_id = models.CharField(max_length=200, null=True, blank=True)
    tenant = models.CharField(max_length=200, null=True, blank=True)
    principal = models.CharField(max_length=200, null=True, blank=True)
    agent_id = models.TextField(null=True, blank=True)
    composition_path = models.JSONField(decoder=JsonbDecoder, default=list)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.EVENTS)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    # What set `status`: its event's seq (a late event with a lower seq must not override it), or
    # a thrown ending's key above every seq (ledger.ingest.projections.THROWN_ENDING_KEYS).
    status_seq = models.IntegerField(default=-1)
    # Wall-clock times of the earliest and latest events received (meta.wallClockMs).
    first_event_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    # The highest `cost.tick` cumulative estimate seen (USD); NULL when the agent reported no cost.
    cost_usd = models.FloatField(null=True, blank=True)
    iterations = models.IntegerField(default=0)
    tool_call_count = models.IntegerField(default=0)
    refusal_count = models.IntegerField(default=0)
    event_count = models.IntegerField(default=0)
    max_seq = models.IntegerField(default=-1)
    # The chain: `chain_length` rows with positions 0..chain_length-1, the last one hashing to head.
    chain_length = models.IntegerField(default=0)
    head_hash = models.BinaryField(max_length=32, default=bytes(32))
    # Records [0, search_indexed) are in the full-text index (RunSearchChunk); the worker catches
    # up in the background, and searches read the rest of the chain directly.
    search_indexed = models.IntegerField(db_default=0)
    # Records [0, spans_indexed) are drawn in the run's waterfall (RunSpan, RunSpanOverview); the
    # worker rebuilds a changed run's spans every few seconds, and the page builds them at once
    # for a run never indexed.
    spans_indexed = models.IntegerField(db_default=0)
    # A stored recording's snapshot holds the run's decisions: its own recording, or that of a
    # run resuming it (a resume carries the ledger on). Decisions projected after it (a late
    # batch) gain the before/after values the snapshot holds.
    has_recording = models.BooleanField(db_default=False)
    # Records [0, rolled_up) are counted in the overview's rollups (ActivityCount, AgentDayUsage);
    # the worker folds the rest in the background, as the search index does.
    rolled_up = models.IntegerField(db_default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    # The month the run was created in, yyyymm (UTC), set by ingestion when it creates the run:
    # every row of its events and projections carries it and lives in that month's partition
    # (ledger/partitions.py), however long the run goes on. 0 (the legacy partition) for runs
    # stored before partitioning, or by the version before during the upgrade; KEPT_PERIOD once
    # retention moved the run to the partition that outlives its month's drop.
    period = models.IntegerField(db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="run_unique_per_project")]
        indexes = [
            models.Index(fields=["project", "-created_at", "-id"], name="run_list_newest"),
            models.Index(fields=["project", "session_id"], name="run_by_session"),
            models.Index(
                fields=["id"],
                name="run_search_pending",
                condition=models.Q(chain_length__gt=models.F("search_indexed")),
            ),
            models.Index(
                fields=["id"],
                name="run_rollup_pending",
                condition=models.Q(chain_length__gt=models.F("rolled_up")),
            ),
            models.Index(
                fields=["id"],
                name="run_spans_pending",
                condition=models.Q(chain_length__gt=models.F("spans_indexed")),
            ),
        ]

    def __str__(self) -> str:
        return self.run_id

    @property
    def head_hex(self) -> str:
        return bytes(self.head_hash).hex()

    @property
    def has_gaps(self) -> bool:
        return self.event_count != self.max_seq + 1


def ingested_by_run(related_name: str) -> "models.ForeignKey[Run]":
    """The run a row written by ingestion belongs to, with no foreign key in the database.

    PostgreSQL checks a foreign key once per inserted row (a query each, at COMMIT); on the
    ingestion path that was a fifth of the database's time. Ingestion creates and row-locks the
    run in the same transaction before writing these rows, and Django's ORM cascades deletes, so
    the database constraint would only guard against writes this server never makes; a run
    deleted behind the server's back is reported by the chain anchors.
    """
    return models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name=related_name, db_index=False, db_constraint=False
    )


_RunRow = TypeVar("_RunRow", bound=models.Model)


class RunRowsQuerySet(models.QuerySet[_RunRow]):
    """Rows of the tables partitioned by month (ledger/partitions.py)."""

    def of_run(self, run: "Run") -> Self:
        """The run's rows, read from its month's partition only: given the run alone, PostgreSQL
        looks in the index of every month's partition kept."""
        return self.filter(run=run, period=run.period)


class RunEvent(models.Model):
    """One stored event, a link in its run's hash chain.

    `body` is the exact canonical text that was hashed; `doc` is the same JSON as `jsonb` for
    queries. `jsonb` normalizes numbers and cannot hold U+0000, so verification always hashes
    `body`, never a re-serialization of `doc`.

    Keyed by its place in the chain: a surrogate id would cost every ingested row a sequence
    call and a btree of its own (11% of a bare COPY's time, measured), for a key nothing uses.
    """

    pk = models.CompositePrimaryKey("run_id", "position")
    run = ingested_by_run("events")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    # The sender's number; NULL for events the server itself appends (a person's decision), so
    # they can never collide with a number the agent will use later.
    seq = models.IntegerField(null=True, blank=True)
    position = models.IntegerField()
    type = models.TextField()
    tool_call_id = models.TextField(null=True, blank=True)
    wall_clock_ms = models.BigIntegerField(null=True, blank=True)
    body = models.TextField()
    doc = models.JSONField(decoder=JsonbDecoder)
    prev_hash = models.BinaryField(max_length=32)
    hash = models.BinaryField(max_length=32)
    received_at = models.DateTimeField(db_default=Now())

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq", "period"], name="runevent_unique_seq"),
        ]
        # The run page's tool-call tab reads one call's steps; only events of a tool call are indexed.
        indexes = [
            models.Index(
                fields=["run", "tool_call_id"],
                name="runevent_by_tool_call",
                condition=models.Q(tool_call_id__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class RunSearchChunk(models.Model):
    """Full-text index of a run's stored events, a chunk of consecutive records per row.

    Written by the worker after ingestion (never on the request path, so indexing costs agents no
    latency); derived data, rebuilt from the chain at will.
    """

    # PostgreSQL refuses a tsvector over 1 MB, and one event may hold megabytes of distinct words:
    # a search reads each record's first SEARCHED_CHARS characters (ledger.explorer.search).
    SEARCHED_CHARS = 50_000

    # No foreign key in the database: the table is partitioned, and a partitioned table's
    # foreign key would be validated across every partition when one is attached.
    run = ingested_by_run("+")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    first_position = models.IntegerField()
    last_position = models.IntegerField()
    document = SearchVectorField()

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "first_position", "period"], name="search_chunk_once")]
        indexes = [GinIndex(fields=["document"], name="search_chunk_document")]

    def __str__(self) -> str:
        return f"{self.run_id}[{self.first_position}..{self.last_position}]"


class RunSpan(models.Model):
    """One bar or mark of a run's waterfall: a stretch of the run between two of its events (a
    turn, an iteration, an LLM call, a tool call, a person's wait) or one event marked where it
    happened (a dispatch step, a refusal, an artifact).

    Derived from the chain by the worker (ledger.explorer.span_index) and rebuilt from it at will;
    times are milliseconds from the run's first event, so a window of the run is one index range.
    """

    class Kind(models.TextChoices):
        TURN = "turn", "turn"
        ITERATION = "iteration", "iteration"
        LLM = "llm", "LLM call"
        TOOL = "tool", "tool call"
        DISPATCH_STEP = "dispatch-step", "dispatch step"
        SUBFLOW = "subflow", "subflow"
        BRANCH = "branch", "parallel branch"
        ASK_WAIT = "ask-wait", "a person's wait"
        REFUSAL = "refusal", "refusal"
        ARTIFACT = "artifact", "artifact mark"

    run = ingested_by_run("+")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    lane = models.SmallIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    start_ms = models.BigIntegerField()
    end_ms = models.BigIntegerField()
    first_seq = models.IntegerField(null=True, blank=True)
    last_seq = models.IntegerField(null=True, blank=True)
    # The record a click opens in the event drawer (the span's first).
    position = models.IntegerField()
    label = models.TextField()
    refused = models.BooleanField(default=False)

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["run", "lane", "start_ms"], name="runspan_by_lane_start")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.kind} {self.start_ms} to {self.end_ms} ms"


class RunSpanCell(models.Model):
    """How many of a lane's spans start in one cell of a grid across the run: the waterfall's
    buckets at every zoom, built with the spans. Level L cuts the run into OVERVIEW_BUCKETS * 4^L
    equal cells, so any window is drawn from the one level that puts 30 to 120 cells in it, read
    as one short index range per lane, never by counting the spans themselves."""

    run = ingested_by_run("+")
    lane = models.SmallIntegerField()
    level = models.SmallIntegerField()
    cell = models.IntegerField()
    spans = models.IntegerField()
    refused = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["run", "level", "lane", "cell"], name="runspancell_by_level_lane")]

    def __str__(self) -> str:
        return f"{self.run_id} lane {self.lane} level {self.level} cell {self.cell}: {self.spans}"


class RunSpanOverview(models.Model):
    """A run's waterfall at its widest zoom, pre-aggregated when its spans are built: the lanes
    with their span counts, and per lane a fixed number of time buckets. The first render of a
    100,000-event run reads this one row, not the run's spans."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    indexed_length = models.IntegerField()
    duration_ms = models.BigIntegerField()
    # [{"lane": 0, "label": "turns", "spans": 3}, …]
    lanes = models.JSONField(decoder=JsonbDecoder)
    # {"<lane>": [[bucket, spans, refused, start_ms, end_ms, position], …]}, only busy buckets.
    buckets = models.JSONField(decoder=JsonbDecoder)
    built_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.run_id} overview ({self.indexed_length} records)"


class ToolCallQuerySet(RunRowsQuerySet["ToolCall"]):
    def unfinished(self) -> "ToolCallQuerySet":
        """Calls started and not ended since: no end, or (an id used twice) none after the latest start."""
        return self.filter(Q(end_seq__isnull=True) | Q(end_seq__lt=F("start_seq")), start_seq__isnull=False)

    def with_args_and_result(self) -> "ToolCallQuerySet":
        """Each call with `args` and `result` as sent, read from its start and end events (None
        while that event has not arrived). The projection keeps no copy of them: the stored event
        is their one home, and copying them made PostgreSQL parse every call's JSON twice."""
        # no-redef: django-stubs declares annotated names again; ToolCall declares them for every reader.
        return self.annotate(  # type: ignore[no-redef]
            args=_payload_value("start_seq", "args"), result=_payload_value("end_seq", "result")
        )


def _payload_value(seq_field: str, key: str) -> Subquery:
    value = KeyTransform(key, KeyTransform("payload", "doc"))
    event = RunEvent.objects.filter(run_id=OuterRef("run_id"), period=OuterRef("period"), seq=OuterRef(seq_field))
    return Subquery(
        event.annotate(value=value).values("value")[:1], output_field=models.JSONField(decoder=JsonbDecoder)
    )


class ToolCall(models.Model):
    """Projection of `stream.tool_start` + `stream.tool_end`, which may arrive in either order.

    Columns are NULL until the event that carries them arrives. `args` and `result` are read from
    the events themselves: `ToolCall.objects.with_args_and_result()`.
    """

    run = ingested_by_run("tool_calls")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    tool_call_id = models.TextField()
    tool_name = models.TextField(null=True, blank=True)
    error = models.BooleanField(null=True, blank=True)
    status = models.TextField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    start_seq = models.IntegerField(null=True, blank=True)
    end_seq = models.IntegerField(null=True, blank=True)

    objects = ToolCallQuerySet.as_manager()
    # Set only on calls read through `with_args_and_result()`.
    args: Any
    result: Any

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tool_call_id", "period"], name="toolcall_unique_id")]
        # A resumed turn is a new run that finishes the paused run's tool call: the shared id links them.
        indexes = [models.Index(fields=["tool_call_id"], name="toolcall_by_id")]

    def __str__(self) -> str:
        return f"{self.tool_name}({self.tool_call_id})"


class MiddlewareDecision(models.Model):
    """Projection of `middleware.decision`. `before`/`after` come only from a recording's snapshot
    (the event stream deliberately omits them): SQL NULL means "not ingested"."""

    run = ingested_by_run("decisions")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    seq = models.IntegerField()
    middleware = models.TextField()
    moment = models.TextField()
    at = models.TextField(null=True, blank=True)
    phase = models.TextField(null=True, blank=True)
    tool_name = models.TextField(null=True, blank=True)
    tool_call_id = models.TextField(null=True, blank=True)
    iteration = models.IntegerField(null=True, blank=True)
    outcome = models.TextField()
    changed = models.BooleanField(null=True, blank=True)
    why = models.TextField(null=True, blank=True)
    component_id = models.TextField(null=True, blank=True)
    origins = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    before = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    after = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq", "period"], name="decision_unique_seq")]

    def __str__(self) -> str:
        return f"{self.middleware}: {self.outcome}"


class PermissionVerdict(models.Model):
    """Projection of `permission.check` and `permission.halt`."""

    run = ingested_by_run("verdicts")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    seq = models.IntegerField()
    event_type = models.TextField()
    capability = models.TextField(null=True, blank=True)
    actor = models.TextField(null=True, blank=True)
    target = models.TextField(null=True, blank=True)
    result = models.TextField()
    policy_rule_id = models.TextField(null=True, blank=True)
    rationale = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq", "period"], name="verdict_unique_seq")]

    def __str__(self) -> str:
        return f"{self.capability}: {self.result}"


class ToolEffect(models.Model):
    """Projection of `tools.effect` (accepted, refused or superseded)."""

    run = ingested_by_run("effects")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    seq = models.IntegerField()
    kind = models.TextField()
    outcome = models.TextField()
    tool_name = models.TextField(null=True, blank=True)
    tool_call_id = models.TextField(null=True, blank=True)
    iteration = models.IntegerField(null=True, blank=True)
    target_skill_id = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    instruction_id = models.TextField(null=True, blank=True)
    delivery_lease = models.TextField(null=True, blank=True)
    refusal_reason = models.TextField(null=True, blank=True)
    superseded_by = models.TextField(null=True, blank=True)

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq", "period"], name="effect_unique_seq")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.outcome}"


class Refusal(models.Model):
    """One row per event that carries a refusal (events-ledger spec §4.3), whatever its kind."""

    class Category(models.TextChoices):
        MIDDLEWARE = "middleware"
        PERMISSION = "permission"
        CHECKIN = "checkin"
        VALIDATION = "validation"
        EFFECT = "effect"
        CEILING = "ceiling"
        SKILL = "skill"
        ARTIFACT = "artifact"
        CREDENTIAL = "credential"
        EVIDENCE = "evidence"
        OUTPUT_CONTRACT = "output-contract"
        INTEGRITY = "integrity"

    run = ingested_by_run("refusals")
    # Its run's period (Run.period): the monthly partition the row lives in (ledger/partitions.py).
    period = models.IntegerField()
    seq = models.IntegerField()
    event_type = models.TextField()
    category = models.CharField(max_length=32, choices=Category.choices)
    # What refused: the middleware, checker, skill, artifact op…; `reason` is its code or words.
    rule = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    tool_name = models.TextField(null=True, blank=True)
    tool_call_id = models.TextField(null=True, blank=True)
    iteration = models.IntegerField(null=True, blank=True)
    wall_clock_ms = models.BigIntegerField(null=True, blank=True)

    objects = RunRowsQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq", "period"], name="refusal_unique_seq")]
        indexes = [
            models.Index(fields=["category"], name="refusal_by_category"),
            # The refusal list's order, newest first in time (ledger.refusals.selectors.REFUSAL_TIME).
            models.Index(Coalesce("wall_clock_ms", Value(-1)).desc(), F("id").desc(), name="refusal_by_time"),
        ]

    def __str__(self) -> str:
        return f"{self.category}: {self.reason}"


class Recording(models.Model):
    """An `agentfootprint.recording.v1` envelope, kept byte for byte as received."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="recordings")
    sha256 = models.BinaryField(max_length=32)
    body = models.BinaryField()
    complete = models.BooleanField(null=True)
    dropped_events = models.IntegerField(default=0)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "sha256"], name="recording_unique_body")]

    def __str__(self) -> str:
        return f"recording of {self.run_id}"


# An ask whose opening, or whose decision once made, the overview's rollups have not counted.
ASK_ROLLUP_PENDING = models.Q(rolled_up=0) | models.Q(rolled_up=1, decided_at__isnull=False)


class Ask(models.Model):
    """A paused run waiting for a person: a middleware `ask`, a tool's check-in, or `askHuman`.

    The checkpoint is the run's whole state at the pause: it is stored verbatim and returned only
    to the agent key that posted it, never shown on a page.
    """

    class Kind(models.TextChoices):
        ASK = "ask", "middleware ask"
        CHECK_IN = "checkIn", "check-in"
        PLAIN = "plain", "question (askHuman)"
        # A tool's declared credential waits on a person's 3LO consent (pauseData.authorization).
        CREDENTIAL = "credential", "authorization consent"
        # A browser handed to a person (`handControlTo('person')`), waiting to be handed back.
        TAKEOVER = "takeover", "person takeover"

    class Status(models.TextChoices):
        OPEN = "open"
        DECIDED = "decided"
        # Its session paused again while it was open (at most one open ask per session).
        SUPERSEDED = "superseded"

    class Via(models.TextChoices):
        PAGE = "page"
        API = "api"
        DEADLINE = "deadline"
        RUN = "run", "reported by the run (decided elsewhere)"
        STANDING = "standing", "a standing approval"

    class OnTimeout(models.TextChoices):
        DECLINE = "decline"
        APPROVE = "approve"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="asks")
    run_id = models.TextField()
    session_id = models.TextField(null=True, blank=True)
    tool_call_id = models.TextField()
    tool_name = models.TextField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    question = models.TextField(null=True, blank=True)
    middleware = models.TextField(null=True, blank=True)
    detail = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    component = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    check_in = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    pause_data = models.JSONField(decoder=JsonbDecoder)
    checkpoint = models.BinaryField(null=True, blank=True)
    # The key the checkpoint is returned to.
    posted_by_key = models.ForeignKey(AgentKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # Every agent key that opened or reported the ask (POST /asks, its pause events, a re-post),
    # whichever came first: none of them may decide it, since the run would approve itself.
    reporting_key_ids = ArrayField(models.BigIntegerField(), default=list, db_default=[], blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    on_timeout = models.CharField(max_length=8, choices=OnTimeout.choices, default=OnTimeout.DECLINE)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(db_default=Now())
    # The `meta.wallClockMs` of its pause event (the agent's clock), once that event is stored:
    # which of a session's asks paused later (ledger.asks.services._supersede_in_session).
    paused_at_ms = models.BigIntegerField(null=True, blank=True)
    # Whether that event is stored (it may carry no clock); an ask only POSTed has none yet.
    pause_reported = models.BooleanField(default=False, db_default=False)
    # Whether the ask was first opened from that event rather than by the agent's POST.
    opened_from_event = models.BooleanField(default=False, db_default=False)
    # The session's later ask that closed this one undecided; it was opened (created_at) then.
    superseded_by = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # The decision, written once by a conditional UPDATE … WHERE status = 'open'.
    approved = models.BooleanField(null=True, blank=True)
    decided_by_label = models.TextField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # An integration's `by` is its own free text (spec §9.3): the key it authenticated with is
    # what the server can vouch for.
    decided_by_key = models.ForeignKey(AgentKey, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_via = models.CharField(max_length=8, choices=Via.choices, null=True, blank=True)
    note = models.TextField(null=True, blank=True)
    value = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    # Whether the decision carries `value` (a question's answer; JSON null is one): absent and
    # null differ (spec §9.1), and a question closed by its deadline resumes with no answer.
    answered = models.BooleanField(default=False, db_default=False)
    # The standing approval that decided it at opening time (via STANDING), or that its own
    # approval granted.
    standing_approval = models.ForeignKey(
        "StandingApproval", on_delete=models.PROTECT, null=True, blank=True, related_name="asks"
    )
    # What the overview's rollups have counted of it (ledger.overview.services.asks_fold_pending):
    # nothing, its opening, or its opening and its decision.
    rolled_up = models.SmallIntegerField(db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "run_id", "tool_call_id"], name="ask_one_per_tool_call"),
            models.CheckConstraint(
                condition=models.Q(status__in=["open", "superseded"], decided_at__isnull=True)
                | models.Q(status="decided", decided_at__isnull=False),
                name="ask_decided_has_time",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="ask_open_newest"),
            models.Index(fields=["project", "status", "-id"], name="ask_inbox"),
            models.Index(fields=["deadline"], name="ask_deadline", condition=models.Q(status="open")),
            # A session's asks, whatever their status: which of them paused later (superseding).
            models.Index(fields=["project", "session_id"], name="ask_in_session"),
            # Ingestion asks, for every batch with a call's end, whether any takeover or consent
            # still waits in the project (ledger.asks.services.asks_close_handed_back): almost never.
            models.Index(
                fields=["project"],
                name="ask_handoff_waiting",
                condition=models.Q(kind__in=["takeover", "credential"], status__in=["open", "superseded"]),
            ),
            # The asks opened, or decided, in a window: what a chart column's link lists.
            models.Index(fields=["project", "created_at"], name="ask_by_opening"),
            models.Index(
                fields=["project", "decided_at"], name="ask_by_decision", condition=models.Q(decided_at__isnull=False)
            ),
            # The asks the overview's rollups have not counted all of yet: a few, whatever the
            # number of asks kept (the fold's scan, and the overview's "figures as of").
            models.Index(fields=["project"], name="ask_rollup_pending", condition=ASK_ROLLUP_PENDING),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.tool_name}({self.tool_call_id})"

    @property
    def at_ms(self) -> int | None:
        return int(self.decided_at.timestamp() * 1000) if self.decided_at else None

    @property
    def is_overdue(self) -> bool:
        """Open past its deadline: only the deadline decides it now (`ask_decide`), so pages offer
        no decision. Read by this process's clock, never written: a page GET leaves closing the ask
        to the deadline pass, and `ask_decide` judges a late click by the database's clock."""
        return self.status == self.Status.OPEN and self.deadline is not None and self.deadline <= timezone.now()

    def decision(self) -> dict[str, object] | None:
        """The framework's decision shape, ready for `agent.resume(checkpoint, decision)`."""
        if self.status != self.Status.DECIDED:
            return None
        decision: dict[str, object] = {
            "approved": bool(self.approved),
            "by": self.decided_by_label or "",
            "at": self.at_ms,
        }
        if self.note:
            decision["note"] = self.note
        if self.answered:
            # askHuman takes any value as the tool's result: resume with `decision.answer`.
            decision["answer" if self.kind == self.Kind.PLAIN else "value"] = self.value
        return decision


def ask_run_agent(to_ask: str = "") -> Subquery:
    """The agent of an ask's run, to annotate a query with; `to_ask` is the path from the query's
    model to the ask ("" on Ask itself, "ask__" from its webhook deliveries). By the run's unique
    key: one index probe a row, whatever the planner believes of the runs table."""
    run = Run.objects.filter(project_id=OuterRef(f"{to_ask}project_id"), run_id=OuterRef(f"{to_ask}run_id"))
    return Subquery(run.values("agent_id")[:1])


class WebhookEndpoint(models.Model):
    """Where a project's decisions are POSTed (HMAC-SHA256 signed with `secret`)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=128)
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    class Kind(models.TextChoices):
        DECISION = "decision", "decision to the agent host"
        NOTIFICATION = "notification"

    class Event(models.TextChoices):
        ASK_OPENED = "ask_opened", "new ask"
        DEADLINE_NEAR = "deadline_near", "deadline approaching"
        ESCALATION = "escalation"

    ask = models.ForeignKey(Ask, on_delete=models.CASCADE, related_name="deliveries")
    # Where the latest attempt went. Each attempt goes to the endpoint's URL of the moment (so a
    # corrected URL reaches pending deliveries) and logs its own; until the first, the URL of the
    # endpoint at the decision.
    url = models.URLField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)
    # An outbox: the worker's sweep sends whatever is due, so a lost queue message (broker down,
    # worker killed) delays a delivery, never drops it. `lease_until` marks one attempt in flight.
    next_attempt_at = models.DateTimeField(db_default=Now())
    lease_until = models.DateTimeField(null=True, blank=True)
    # A notification to people (ledger.asks.notifications) rides the same outbox as the decision
    # to the agent host: the same backoff, lease and logged attempts. `url` is then the channel's
    # URL or `mailto:` the person's address.
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DECISION, db_default=Kind.DECISION)
    channel = models.ForeignKey(
        "NotificationChannel", on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries"
    )
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    event = models.CharField(max_length=16, choices=Event.choices, blank=True, default="", db_default="")
    # The escalation step it tells of (0 for the other events): each is sent once per recipient.
    step = models.SmallIntegerField(default=0, db_default=0)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["ask"], name="one_delivery_per_ask", condition=models.Q(kind="decision")),
            models.UniqueConstraint(
                fields=["ask", "event", "step", "channel", "recipient"],
                name="one_notification_each",
                condition=models.Q(kind="notification"),
                nulls_distinct=False,
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_due",
                condition=~models.Q(status="delivered"),
            ),
            # The notification sweep's claim walks this in its order (next_attempt_at, then id) and
            # stops after a batch; without it each batch sorted every waiting message, so draining
            # a backlog cost the database time growing with the backlog's square.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="notification_due",
                condition=models.Q(kind="notification") & ~models.Q(status="delivered"),
            ),
        ]

    def __str__(self) -> str:
        return f"delivery of ask {self.ask_id}: {self.status}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField(db_default=Now())
    url = models.URLField(max_length=500)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"attempt at {self.at}: {self.status_code or self.error}"


class AuditBundle(models.Model):
    """An imported `agentfootprint.audit/1` bundle, or an ordered list of drained segments, kept
    exactly as received. The chain fields describe it as a whole: first segment's head, last
    segment's final hash."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="audit_bundles")
    body = models.BinaryField()
    sha256 = models.BinaryField(max_length=32)
    segment_count = models.IntegerField(default=1)
    first_seq = models.BigIntegerField(null=True, blank=True)
    record_count = models.IntegerField(default=0)
    chain_head = models.TextField(blank=True)
    final_hash = models.TextField(blank=True)
    run_ids = ArrayField(models.TextField(), default=list)
    # The stored bundle this one continues (its finalHash is this one's chainHead).
    continues = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    verdict = models.JSONField(decoder=JsonbDecoder)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "sha256"], name="audit_bundle_once")]
        indexes = [models.Index(fields=["project", "final_hash"], name="audit_bundle_by_final")]

    def __str__(self) -> str:
        return f"audit bundle from seq {self.first_seq} ({self.record_count} records)"


class OtlpSpan(models.Model):
    """One OpenTelemetry span received on /v1/traces, kept verbatim beside its mapping to events.

    Ids are lowercase hex as in OTLP/JSON; `protobuf` is the span as received, which `raw` reads
    as OTLP/JSON (spans stored before migration 0037 kept it as OTLP/JSON in `stored_json`); the
    other columns are what the ledger queries. The span's synthetic
    events carry seqs `first_seq … first_seq + event_count - 1` of run "otlp-<trace_id>": numbers
    handed out once, when the span is first stored, so a re-sent span maps to nothing new.
    """

    # No foreign key in the database, as for ingested_by_run: checked once per span at COMMIT, it
    # cost OTLP ingestion as much of PostgreSQL's time as writing the span. The project is the
    # agent key's, read in the same request; Django's ORM cascades a project's deletion, and run
    # retention deletes a trace's spans with its run. No index of its own either: both unique
    # constraints begin with it.
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="otlp_spans", db_index=False, db_constraint=False
    )
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    # "" for a root span. The parent may arrive later, in another request, or never.
    parent_span_id = models.CharField(max_length=16, blank=True, default="")
    name = models.TextField()
    kind = models.SmallIntegerField(default=0)
    start_unix_nano = models.BigIntegerField()
    end_unix_nano = models.BigIntegerField()
    status_code = models.SmallIntegerField(default=0)
    status_message = models.TextField(blank=True, default="")
    attributes = models.JSONField(decoder=JsonbDecoder, default=dict)
    events = models.JSONField(decoder=JsonbDecoder, default=list)
    resource_attributes = models.JSONField(decoder=JsonbDecoder, default=dict)
    scope = models.JSONField(decoder=JsonbDecoder, default=dict)
    # Protobuf-encoded (an OTLP/JSON span as the message it decodes to), not jsonb: the verbatim
    # copy is written once per span and read only to be shown or compared with a re-sent span.
    # NULL on the spans stored before, whose copy is `stored_json`: they were not rewritten, so
    # upgrading costs no table rewrite and the version before goes on storing spans meanwhile.
    protobuf = models.BinaryField(null=True)
    stored_json = models.JSONField(decoder=JsonbDecoder, null=True, db_column="raw")
    # Order in which the trace's spans were first stored (0, 1, 2 …).
    span_number = models.IntegerField()
    first_seq = models.IntegerField()
    event_count = models.IntegerField()
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = "OTLP span"
        constraints = [
            models.UniqueConstraint(fields=["project", "trace_id", "span_id"], name="otlpspan_unique_span"),
            models.UniqueConstraint(fields=["project", "trace_id", "span_number"], name="otlpspan_unique_number"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.trace_id}/{self.span_id})"

    @property
    def raw(self) -> dict[str, Any]:
        """The span as OTLP/JSON, read from its verbatim copy."""
        if self.protobuf is None:
            return dict(self.stored_json or {})
        return span_json(bytes(self.protobuf))


class IntegrityCheck(models.Model):
    """One on-demand re-walk of a run's chain, with its progress (long chains run in Celery)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="integrity_checks")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    records_total = models.IntegerField()
    records_checked = models.IntegerField(default=0)
    valid = models.BooleanField(null=True, blank=True)
    broken_at = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["run", "-id"], name="integrity_latest")]

    def __str__(self) -> str:
        return f"check {self.pk} of {self.run_id}: {self.status}"

    @property
    def percent(self) -> int:
        return 100 if not self.records_total else min(100, self.records_checked * 100 // self.records_total)


class ChainAnchor(models.Model):
    """A signed checkpoint of a project's chain heads, written once per period.

    It lives outside the rows it covers and is signed with a key that is not in the database, so
    deleting the tail of a run (and rewriting the run's own head columns to match) is detected:
    the anchored head is no longer in the chain. Anchors chain to each other by `prev_digest`, so
    a removed anchor shows as a break in that chain.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="chain_anchors")
    number = models.IntegerField()
    prev_digest = models.BinaryField(max_length=32)
    digest = models.BinaryField(max_length=32)
    signature = models.BinaryField(max_length=32)
    run_count = models.IntegerField()
    # ledger.audits.anchors.DIGEST_FORMAT when written; anchors from before format 2 keep 1.
    digest_format = models.PositiveSmallIntegerField(default=2)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="anchor_number_per_project")]

    def __str__(self) -> str:
        return f"anchor {self.number} of {self.project_id}"


class AnchoredHead(models.Model):
    """A run's chain head as an anchor saw it. Keyed by the run's id text, not a foreign key:
    deleting a whole run must not delete the evidence that it existed."""

    anchor = models.ForeignKey(ChainAnchor, on_delete=models.CASCADE, related_name="heads")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    run_id = models.CharField(max_length=200)
    chain_length = models.IntegerField()
    head_hash = models.BinaryField(max_length=32)

    class Meta:
        indexes = [models.Index(fields=["project", "run_id", "-chain_length"], name="anchored_head_latest")]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.chain_length}"


class LedgerRetention(models.Model):
    """How long a project keeps its runs: past `keep_days` since its last event, a run is archived
    as its audit bundle and removed, leaving a RunTombstone. No row: runs are kept forever."""

    MIN_DAYS = 1
    MAX_DAYS = 36_500

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="ledger_retention")
    keep_days = models.IntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "run retention"

    def __str__(self) -> str:
        return f"runs of {self.project_id} kept {self.keep_days} days"


class RunHold(models.Model):
    """A legal hold: while any hold on a run is in force (not released), retention never removes
    it. Several cases may hold one run; each is released on its own."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="run_holds", db_index=False)
    run_id = models.CharField(max_length=200)
    reason = models.CharField(max_length=500)
    placed_by = models.CharField(max_length=200)
    placed_at = models.DateTimeField(db_default=Now())
    released_by = models.CharField(max_length=200, blank=True, default="")
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["project", "run_id"], name="run_hold_by_run")]

    def __str__(self) -> str:
        return f"hold on {self.run_id}"


class RunTombstone(models.Model):
    """What retention removed: the run's id, its chain head and record count as they were, where
    its archive went and the archive's SHA-256, so the archive can be checked against it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="run_tombstones", db_index=False)
    run_id = models.CharField(max_length=200)
    chain_length = models.IntegerField()
    head_hash = models.BinaryField(max_length=32)
    first_event_at = models.DateTimeField(null=True)
    last_event_at = models.DateTimeField(null=True)
    keep_days = models.IntegerField()
    archive_location = models.TextField()
    archive_sha256 = models.CharField(max_length=64)
    archive_bytes = models.BigIntegerField()
    removed_at = models.DateTimeField(db_default=Now())

    class Meta:
        # A run id may be used again after its run was removed: each removal keeps its own stone.
        indexes = [models.Index(fields=["project", "run_id", "-removed_at"], name="run_tombstone_latest")]

    def __str__(self) -> str:
        return f"tombstone of {self.run_id}"


# Time to decision is counted in buckets of a fixed ratio: bucket k holds the times from
# 2^(k/n) to 2^((k+1)/n) seconds (n = this), so a percentile read from the buckets (the middle of
# the bucket holding that rank) is within 2^(1/2n) - 1 (4.4%) of the decision time at that rank,
# and a window holds at most a few hundred buckets.
DECISION_TIME_BUCKETS_PER_DOUBLING = 8


class ActivityCount(models.Model):
    """How many things of a kind happened in a project in one minute: the overview's counters.

    Folded from stored records by the worker (ledger.overview.services.rollups_fold_pending), so the
    overview reads a window's minutes, never the events behind them. `key` says which thing of the
    kind (a status, a category, a tool); empty when the kind has one.
    """

    class Kind(models.TextChoices):
        EVENTS = "events", "events stored"
        RUN_STARTED = "run-started", "runs started"
        RUN_ENDED = "run-ended", "runs ended"  # key: the status the ending moved the run to
        REFUSAL_CATEGORY = "refusal-category", "refusals by category"
        REFUSAL_RULE = "refusal-rule", "refusals by rule"
        TOOL_ERROR = "tool-error", "tool calls that failed"
        TOOL_REFUSAL = "tool-refusal", "refusals of a tool"
        # Asks, in the minute they were opened or decided (ledger.overview.services.asks_fold_pending).
        ASK_OPENED = "ask-opened", "asks opened"
        ASK_DECIDED = "ask-decided", "asks decided"  # by a person, an agent's key, a standing approval or the run
        ASK_TIMED_OUT = "ask-timed-out", "asks closed by their deadline"
        # key: the decided ask's time to decision as a bucket of DECISION_TIME_BUCKETS_PER_DOUBLING
        ASK_DECISION_TIME = "ask-decision-time", "asks decided, by time to decision"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    minute = models.DateTimeField()
    kind = models.CharField(max_length=24, choices=Kind.choices)
    key = models.TextField(default="", blank=True)
    count = models.BigIntegerField(default=0)

    class Meta:
        # Also the window's index: a project's minutes from `since` on.
        constraints = [
            models.UniqueConstraint(fields=["project", "minute", "kind", "key"], name="activity_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} at {self.minute:%Y-%m-%d %H:%M}: {self.count}"


class ActivityHourCount(models.Model):
    """ActivityCount's minutes summed into hours, written by the same fold in the same transaction.

    A window of a week or 30 days reads its hours (at most 720 a project and key) instead of up to
    43,200 minutes, so its cost stays bounded however busy the ledger grows. Being written with
    the minutes, an hour still under way is as current as they are.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    kind = models.CharField(max_length=24, choices=ActivityCount.Kind.choices)
    key = models.TextField(default="", blank=True)
    count = models.BigIntegerField(default=0)

    class Meta:
        # Also the window's index: a project's hours from `since` on.
        constraints = [
            models.UniqueConstraint(fields=["project", "hour", "kind", "key"], name="activity_hour_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} in the hour from {self.hour:%Y-%m-%d %H:%M}: {self.count}"


class ActivityDayCount(models.Model):
    """ActivityCount's minutes summed into UTC days, written with them like ActivityHourCount: a
    30-day window reads 30 of them a project and key, however busy its minutes were."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateTimeField()  # the day's first moment, UTC
    kind = models.CharField(max_length=24, choices=ActivityCount.Kind.choices)
    key = models.TextField(default="", blank=True)
    count = models.BigIntegerField(default=0)

    class Meta:
        # Also the window's index: a project's days from `since` on.
        constraints = [
            models.UniqueConstraint(fields=["project", "day", "kind", "key"], name="activity_day_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} on {self.day:%Y-%m-%d}: {self.count}"


class AgentDayUsage(models.Model):
    """Tokens and cost an agent reported in a project on one day (UTC), folded like ActivityCount.

    Tokens are the `usage` of each `stream.llm_end`; cost is what each run's cumulative
    `cost.tick` estimate grew by, counted on the day it grew."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateField()
    agent = models.TextField(default="", blank=True)  # the run's agentId; empty when none was configured
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "day", "agent"], name="agent_day_usage_unique")]

    def __str__(self) -> str:
        return f"{self.agent or '(no agent id)'} on {self.day}"


class RollupRunCost(models.Model):
    """The part of a run's cumulative cost estimate the rollups have counted, so the next fold
    counts only what it grew by. Only runs that report cost have one."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="+")
    cost_usd = models.FloatField()

    def __str__(self) -> str:
        return f"{self.run_id}: {self.cost_usd}"


class NotificationChannel(models.Model):
    """Where a project's people are told of its asks: an email list, a Slack-compatible incoming
    webhook or a generic signed JSON webhook. Its name is what escalation steps notify."""

    class Kind(models.TextChoices):
        EMAIL = "email"
        SLACK = "slack", "Slack-compatible webhook"
        WEBHOOK = "webhook", "signed JSON webhook"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notification_channels")
    name = models.CharField(max_length=60)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Email addresses, comma-separated, or the webhook's URL.
    target = models.TextField()
    secret = models.CharField(max_length=64)
    on_new_ask = models.BooleanField(default=True)
    on_deadline = models.BooleanField(default=True)
    # Off: a message carries the agent, tool and question only, never the call's arguments.
    include_payload = models.BooleanField(default=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="notification_channel_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class NotificationPreference(models.Model):
    """What one person wants emailed about one project's asks (their settings page)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    on_new_ask = models.BooleanField(default=False)
    on_deadline = models.BooleanField(default=False)
    on_escalation = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="notification_preference_once")]

    def __str__(self) -> str:
        return f"{self.user_id} on {self.project_id}"


class DeadlineRule(models.Model):
    """A project's deadline for the asks of one tool (or of one middleware's asks) that carry none
    of their own, its escalation steps, and the default the deadline applies."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="deadline_rules")
    # Exactly one of the two: a tool's name, or a middleware's name as its asks carry it.
    tool_name = models.TextField(blank=True, default="")
    middleware = models.TextField(blank=True, default="")
    deadline_minutes = models.PositiveIntegerField()
    on_timeout = models.CharField(max_length=8, choices=Ask.OnTimeout.choices, default=Ask.OnTimeout.DECLINE)
    note = models.TextField(blank=True, default="")
    # [{"afterMinutes": 10, "notify": "<channel name>"}, …], in order, each before the deadline.
    escalation = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "tool_name", "middleware"], name="deadline_rule_once"),
            models.CheckConstraint(
                condition=(models.Q(tool_name="") & ~models.Q(middleware=""))
                | (~models.Q(tool_name="") & models.Q(middleware="")),
                name="deadline_rule_one_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name or self.middleware}: {self.deadline_minutes} min"


class AskEscalation(models.Model):
    """The deadline rule an ask was opened under, as it was then (a later edit of the rule does
    not move the deadline of an ask already waiting), and how far its escalation has gone."""

    ask = models.OneToOneField(Ask, on_delete=models.CASCADE, related_name="escalation")
    rule = models.ForeignKey(DeadlineRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    note = models.TextField(blank=True, default="")
    steps = models.JSONField(default=list)
    next_step = models.SmallIntegerField(default=0)
    # When the next step is due; NULL once every step has been taken.
    next_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_at"], name="escalation_due", condition=models.Q(next_at__isnull=False))]

    def __str__(self) -> str:
        return f"escalation of ask {self.ask_id}: step {self.next_step}"


class ApproverGroup(models.Model):
    """A named set of a project's people (its admins keep the members) that rules require."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="approver_groups", db_index=False)
    name = models.CharField(max_length=64)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="approver_groups", blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="approver_group_unique_name")]

    def __str__(self) -> str:
        return self.name


class ApprovalRule(models.Model):
    """Who must approve a tool's calls (all of them, or those whose arguments match `conditions`):
    `quorum` different people of `group`. Declining needs one member of the group."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="approval_rules", db_index=False)
    tool_name = models.CharField(max_length=200)
    # [{"arg": "amount", "op": "gt", "value": 1000}, …]: all must hold (ledger.asks.approver_rules).
    conditions = models.JSONField(default=list, blank=True)
    group = models.ForeignKey(ApproverGroup, on_delete=models.PROTECT, related_name="rules")
    quorum = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["project", "tool_name"], name="approval_rule_by_tool")]
        constraints = [
            models.CheckConstraint(condition=Q(quorum__gte=1, quorum__lte=10), name="approval_rule_quorum_range")
        ]

    def __str__(self) -> str:
        return f"{self.tool_name}: {self.quorum} of {self.group_id}"


class QuorumApproval(models.Model):
    """One person's approval toward an ask's quorum, recorded and shown before the quorum is met.
    One place per person: the unique constraint is what stops one person filling two."""

    ask = models.ForeignKey(Ask, on_delete=models.CASCADE, related_name="quorum_approvals")
    rule = models.ForeignKey(ApprovalRule, on_delete=models.SET_NULL, null=True, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    by_label = models.CharField(max_length=200)
    note = models.TextField(null=True, blank=True)
    at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["ask", "user"], name="quorum_approval_one_place_per_person")]

    def __str__(self) -> str:
        return f"{self.by_label} approved ask {self.ask_id}"


class StandingApprovalLimits(models.Model):
    """What a project's admins allow a standing approval: none at all until they set these."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="standing_limits")
    max_minutes = models.PositiveIntegerField(default=0)  # 0: standing approvals are off
    allow_any_agent = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"standing approvals up to {self.max_minutes} min"


class StandingApproval(models.Model):
    """ "Approve this and the same calls for the next N minutes": one person's approval of a tool's
    later calls whose arguments match `pattern`, from one agent or any, until `expires_at` or its
    revocation. Granted by approving `source_ask`, whose chained decision records it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="standing_approvals", db_index=False)
    tool_name = models.CharField(max_length=200)
    # {arg: exact JSON value | {"min": n, "max": n}} naming every argument (ledger.asks.approver_rules).
    pattern = models.JSONField()
    agent_id = models.TextField(null=True, blank=True)  # None: any agent of the project
    source_ask = models.ForeignKey(Ask, on_delete=models.PROTECT, related_name="+")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    granted_by_label = models.CharField(max_length=200)
    note = models.TextField(null=True, blank=True)
    granted_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    revoked_by_label = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [
            # The fast path at every ask's opening: the tool's standing approvals not revoked (the
            # expiry is compared in the query; now() may not appear in an index's predicate).
            models.Index(
                fields=["project", "tool_name", "expires_at"],
                name="standing_in_force",
                condition=Q(revoked_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"standing approval of {self.tool_name} until {self.expires_at:%Y-%m-%d %H:%M}"

    @property
    def in_force(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now()
