"""Reads of asks: one ask for its project or for a person, the inbox, a project's asks, and the
context a person decides on. Scoped by project membership (tenancy.selectors).
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import DateTimeField, OuterRef, Q, Subquery, TextField, Value
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, Left, Now

from artifacts.models import Artifact
from artifacts.selectors import ArtifactView, artifact_shown, artifacts_referenced, payload_preview
from footprint_site.pagination import Page, keyset_page
from ledger.exceptions import AskNotFound
from ledger.models import Ask, Run, RunEvent, ToolCall
from tenancy.models import Project
from tenancy.selectors import approver_projects, projects_for_user, role_of

# What approving an ask does, in the words the inbox and the ask page use, for the kinds where
# "approve" alone would not say it.
APPROVING_DOES: dict[str, str] = {
    Ask.Kind.TAKEOVER: "hand control back to the agent",
    Ask.Kind.CREDENTIAL: "grant the authorization the step asks for",
}


def ask_get(*, project: Project, ask_id: int) -> Ask:
    ask = Ask.objects.filter(project=project, pk=ask_id).defer("checkpoint").first()
    if ask is None:
        raise AskNotFound(f"No ask {ask_id} in this project.")
    return ask


# Open and not past its deadline: an overdue ask waits for nobody, since only the deadline decides
# it (`ask_decide`); the database's clock, as the deadline pass reads it.
_WAITING_FOR_A_PERSON = Q(status=Ask.Status.OPEN) & (Q(deadline__isnull=True) | Q(deadline__gt=Now()))


# An ask without a deadline ranks after every ask with one, oldest first among themselves.
NO_DEADLINE = datetime(9999, 1, 1, tzinfo=UTC)


def inbox_open_asks(*, user: User | AnonymousUser, cursor: str | None = None, limit: int = 25) -> Page[Ask]:
    """A page of asks waiting for a decision in the user's approver projects, most urgent first:
    the nearest deadline first, then the asks without one, oldest first; keyset-paged on
    (deadline, id), whose cursor (`urgency_cursor`) is the last row's deadline and id."""
    # Project ids first: with a literal list the planner walks the inbox index and stops at the page.
    project_ids = list(approver_projects(user).values_list("id", flat=True))
    asks = (
        Ask.objects.filter(_WAITING_FOR_A_PERSON, project_id__in=project_ids)
        .select_related("project")
        .annotate(urgent_at=Coalesce("deadline", Value(NO_DEADLINE, output_field=DateTimeField())))
    )
    after = _decode_urgency(cursor)
    return keyset_page(
        asks.defer("checkpoint", "pause_data", "check_in"), order=("urgent_at", "pk"), after=after, limit=limit
    )


def urgency_cursor(page: Page[Ask]) -> str | None:
    """The inbox's next-page cursor: the last row's (deadline, id), as microseconds and id."""
    if page.next_after is None:
        return None
    urgent_at, pk = page.next_after
    return f"{int(urgent_at.timestamp() * 1_000_000)}.{pk}"


def _decode_urgency(cursor: str | None) -> tuple[datetime, int] | None:
    """An undecodable cursor restarts the listing rather than failing it."""
    micros, _, pk = (cursor or "").partition(".")
    if not (micros.isdigit() and pk.isdigit()):
        return None
    try:
        return datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC), int(pk)
    except (OverflowError, ValueError, OSError):
        return None


@dataclass(frozen=True)
class AskFilter:
    # `open`: waiting for a decision, as the inbox lists them (past its deadline, an open ask is
    # the deadline pass's to decide); `decided` and `superseded` as stored.
    status: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    kind: str | None = None


def ask_list(*, project: Project, filters: AskFilter, cursor: str | None = None, limit: int = 50) -> Page[Ask]:
    """A page of the project's asks, newest first, keyset-paged, without checkpoints."""
    asks = Ask.objects.filter(project=project)
    if filters.status == Ask.Status.OPEN:
        asks = asks.filter(_WAITING_FOR_A_PERSON)
    elif filters.status is not None:
        asks = asks.filter(status=filters.status)
    for field, value in (("run_id", filters.run_id), ("session_id", filters.session_id), ("kind", filters.kind)):
        if value is not None:
            asks = asks.filter(**{field: value})
    return keyset_page(asks.defer("checkpoint", "pause_data", "check_in"), order="-pk", cursor=cursor, limit=limit)


@dataclass(frozen=True)
class AskWindowFilter:
    """The ask list's filters, as the overview's asks chart counts: opened (`created_at`) or
    decided (`decided_at`) in [since, until); `closed_by` "deadline" for the asks the deadline
    closed, "decision" for the others (a person, an agent's key or the run decided them)."""

    project: str | None = None  # a slug among the person's projects
    opened_since: datetime | None = None
    opened_until: datetime | None = None
    decided_since: datetime | None = None
    decided_until: datetime | None = None
    closed_by: str | None = None


def asks_for_user(
    *, user: User | AnonymousUser, filters: AskWindowFilter, cursor: str | None = None, limit: int = 50
) -> Page[Ask]:
    """A page of the asks of the person's projects (any role reads them, as the overview counts
    them), newest first, keyset-paged, without checkpoints."""
    asks = Ask.objects.filter(project__in=projects_for_user(user))
    if filters.project:
        asks = asks.filter(project__slug=filters.project)
    for field, value in (
        ("created_at__gte", filters.opened_since),
        ("created_at__lt", filters.opened_until),
        ("decided_at__gte", filters.decided_since),
        ("decided_at__lt", filters.decided_until),
    ):
        if value is not None:
            asks = asks.filter(**{field: value})
    if filters.closed_by == "deadline":
        asks = asks.filter(decided_via=Ask.Via.DEADLINE)
    elif filters.closed_by == "decision":
        asks = asks.filter(decided_at__isnull=False).exclude(decided_via=Ask.Via.DEADLINE)
    asks = asks.select_related("project").defer("checkpoint", "pause_data", "check_in")
    return keyset_page(asks, order="-pk", cursor=cursor, limit=limit)


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


# The tool calls shown before the one a person decides on, latest last, and how much of each
# result: enough to recognise it, never a payload (a result may be megabytes).
PRIOR_CALLS = 8
RESULT_SUMMARY_CHARS = 240
MODEL_MESSAGE_CHARS = 2000
LLM_END = "agentfootprint.stream.llm_end"


@dataclass(frozen=True)
class PriorCall:
    """A tool call the run made before the ask, with its arguments and result cut to a glance."""

    tool_name: str | None
    tool_call_id: str
    failed: bool
    args: str
    result: str | None  # None while its end has not arrived

    @staticmethod
    def summary(text: str | None, limit: int) -> str | None:
        if text is None:
            return None
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:  # cut off mid-JSON by the query: shown as the text it is
            value = None
        shown = value if isinstance(value, str) else text
        shown = " ".join(shown.split())
        return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _payload_text(seq_field: str, key: str, limit: int) -> Subquery:
    """The first `limit` characters of one payload member of a call's start or end event, as JSON text."""
    event = RunEvent.objects.filter(run_id=OuterRef("run_id"), period=OuterRef("period"), seq=OuterRef(seq_field))
    value = Left(Cast(KeyTransform(key, KeyTransform("payload", "doc")), TextField()), limit)
    return Subquery(event.annotate(value=value).values("value")[:1], output_field=TextField())


def _prior_calls(run: Run, before_seq: int) -> list[PriorCall]:
    rows = (
        ToolCall.objects.of_run(run)
        .filter(start_seq__lt=before_seq)
        .annotate(
            args_text=_payload_text("start_seq", "args", RESULT_SUMMARY_CHARS * 2),
            result_text=_payload_text("end_seq", "result", RESULT_SUMMARY_CHARS * 2),
        )
        .order_by("-start_seq")
        .values_list("tool_name", "tool_call_id", "error", "args_text", "result_text")[:PRIOR_CALLS]
    )
    return [
        PriorCall(
            tool_name=name,
            tool_call_id=call_id,
            failed=bool(error),
            args=PriorCall.summary(args, RESULT_SUMMARY_CHARS) or "",
            result=PriorCall.summary(result, RESULT_SUMMARY_CHARS),
        )
        for name, call_id, error, args, result in rows
    ][::-1]


def _last_model_message(run: Run, before_seq: int) -> str | None:
    """What the model last said before the ask (its latest `stream.llm_end` content)."""
    content = Left(KeyTextTransform("content", KeyTransform("payload", "doc")), MODEL_MESSAGE_CHARS)
    text = (
        RunEvent.objects.of_run(run)
        .filter(seq__lt=before_seq, type=LLM_END)
        .order_by("-seq")
        .annotate(content=content)
        .values_list("content", flat=True)
        .first()
    )
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip()


@dataclass(frozen=True)
class AskOutcomes:
    """What each answer does, in the page's words: what runs on approve, what the model reads on decline."""

    approve: str
    decline: str
    runs_tool: bool  # approving runs the tool call with the arguments shown


def ask_outcomes(*, ask: Ask, args: Any) -> AskOutcomes:
    tool = ask.tool_name or "the tool"
    call = f"call {ask.tool_call_id}"
    if ask.kind == Ask.Kind.PLAIN:
        return AskOutcomes(
            approve=f"Your answer becomes the result of {tool} ({call}): the model reads it and carries on.",
            decline="Until someone answers, the run waits (past a deadline it closes with no answer).",
            runs_tool=False,
        )
    if ask.kind in APPROVING_DOES:
        return AskOutcomes(
            approve=f"Approving will {APPROVING_DOES[ask.kind]}; then {tool} ({call}) carries on.",
            decline=f"Declining refuses it: {tool} does not go on, and the model reads the refusal.",
            runs_tool=False,
        )
    with_args = " with the arguments below" if args is not None else ""
    checked = "the remaining middleware checks it, then " if ask.kind == Ask.Kind.ASK else ""
    return AskOutcomes(
        approve=(
            f"Approving runs {tool} ({call}){with_args}: {checked}the tool executes and the model reads its result."
        ),
        decline=(
            f"Declining stops it: {tool} does not run, and the model reads “declined by human: <your note>” "
            "as the tool's result (“declined by human” without a note)."
        ),
        runs_tool=True,
    )


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
    prior_calls: list[PriorCall] = []
    last_model_message: str | None = None
    if run is not None:
        before = call.start_seq if call and call.start_seq is not None else run.max_seq + 1
        prior_calls = _prior_calls(run, before)
        last_model_message = _last_model_message(run, before)
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
        "prior_calls": prior_calls,
        "last_model_message": last_model_message,
        "outcomes": ask_outcomes(ask=ask, args=args),
        "artifacts": artifacts,
        "history": history,
        "component": component,
    }


# What a resumed run files that closes an ask of each kind (ledger.asks.services): a question
# (askHuman) is closed by nothing its run reports, only decided.
_REPORTED_BY = {
    Ask.Kind.CHECK_IN: ("agentfootprint.checkin.decision",),
    Ask.Kind.ASK: ("agentfootprint.checkin.decision", "agentfootprint.middleware.decision"),
    Ask.Kind.TAKEOVER: ("agentfootprint.stream.tool_end",),
    Ask.Kind.CREDENTIAL: ("agentfootprint.stream.tool_end",),
}


def ask_unresolved_report(*, ask: Ask) -> str | None:
    """Why a resumed run's report left `ask` undecided, when it is the one true ambiguity: its
    session paused twice on the same tool call id, so the report names a call two of the session's
    asks wait on (`services._the_ask_reported`). None otherwise."""
    types = _REPORTED_BY.get(Ask.Kind(ask.kind))
    if ask.status == Ask.Status.DECIDED or ask.session_id is None or types is None:
        return None
    waiting = list(
        Ask.objects.filter(
            project_id=ask.project_id,
            session_id=ask.session_id,
            tool_call_id=ask.tool_call_id,
            status__in=(Ask.Status.OPEN, Ask.Status.SUPERSEDED),
        ).values_list("run_id", flat=True)
    )
    if len(waiting) < 2:
        return None
    reporting_run = (
        RunEvent.objects.filter(
            run__project_id=ask.project_id,
            run__session_id=ask.session_id,
            tool_call_id=ask.tool_call_id,
            type__in=types,
        )
        .exclude(run__run_id__in=waiting)
        .values_list("run__run_id", flat=True)
        .first()
    )
    if reporting_run is None:
        return None
    return (
        f"Run {reporting_run} of session {ask.session_id} resumed tool call {ask.tool_call_id} and reported "
        f"how it was decided, but {len(waiting)} asks of this session paused on that call id, so the "
        "server cannot tell which one it answers. It decides neither: this ask stays as it is until "
        "someone decides it here."
    )
