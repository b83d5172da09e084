from datetime import datetime
from typing import Any

from django import forms

from footprint_site.exceptions import MalformedBody
from footprint_site.lib.jsonbody import parse_json
from footprint_site.lib.times import to_utc
from ledger.asks import selectors as ask_selectors
from ledger.explorer.selectors import MAX_SEARCH_CHARS, RunFilter
from ledger.models import LedgerRetention, NotificationChannel, Refusal, Run
from ledger.overview.selectors import DEFAULT_WINDOW, WINDOWS, Window
from ledger.refusals import selectors as refusal_selectors
from tenancy.models import Project


class DecisionForm(forms.Form):
    """Approve or decline (consent gates), or answer (plain asks). `by` is never a field."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("decline", "Decline"), ("answer", "Answer")])
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    value = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea(attrs={"rows": 3}))
    value_is_json = forms.BooleanField(required=False, label="the answer is JSON")
    # An answer is shown back before it is sent: only a post carrying this sends it.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, plain: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plain = plain

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        decision = cleaned.get("decision")
        if self.plain and decision != "answer":
            raise forms.ValidationError("This question takes an answer, not approve or decline.")
        if not self.plain and decision == "answer":
            raise forms.ValidationError("This ask is approved or declined.")
        if decision == "answer" and cleaned.get("value_is_json"):
            try:
                cleaned["value"] = parse_json((cleaned.get("value") or "").encode())
            except MalformedBody as exc:
                # Invalid JSON says so plainly; a duplicate key or a too-deep value names the problem.
                self.add_error("value", "This is not valid JSON." if "not valid JSON" in exc.message else exc.message)
        if decision == "answer" and isinstance(cleaned.get("value"), str) and not cleaned["value"].strip():
            self.add_error("value", "The answer cannot be empty: write what the run should hear.")
        for name in ("note", "value"):
            if isinstance(cleaned.get(name), str) and "\x00" in cleaned[name]:
                self.add_error(name, "U+0000 cannot be kept in a decision.")
        return cleaned


class RunFilterForm(forms.Form):
    """The run list's query string. A value that does not parse is dropped, never a 400."""

    project = forms.SlugField(required=False)
    # Ids are stored whole, however long: a filter by one is never cut short or dropped for its length.
    session = forms.CharField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any"), *Run.Status.choices])
    agent = forms.CharField(required=False)
    tool = forms.CharField(required=False)
    since = forms.DateTimeField(required=False)
    until = forms.DateTimeField(required=False)
    ended_since = forms.DateTimeField(required=False, label="last event from")
    ended_until = forms.DateTimeField(required=False, label="last event until")
    stored_since = forms.DateTimeField(required=False, label="events stored from")
    stored_until = forms.DateTimeField(required=False, label="events stored until")
    has_refusals = forms.BooleanField(required=False, label="with refusals")
    has_open_asks = forms.BooleanField(required=False, label="with open asks")
    tool_failed = forms.BooleanField(required=False, label="where a call of that tool failed")
    q = forms.CharField(required=False, max_length=MAX_SEARCH_CHARS, label="Search payloads")

    def clean_since(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("since"))

    def clean_until(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("until"))

    def clean_ended_since(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("ended_since"))

    def clean_ended_until(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("ended_until"))

    def clean_stored_since(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("stored_since"))

    def clean_stored_until(self) -> datetime | None:
        return self._storable(self.cleaned_data.get("stored_until"))

    @staticmethod
    def _storable(value: datetime | None) -> datetime | None:
        try:
            return None if value is None else to_utc(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def filters(self) -> RunFilter:
        self.is_valid()
        data = {k: v for k, v in getattr(self, "cleaned_data", {}).items() if k not in self.errors}
        return RunFilter(
            project=data.get("project") or None,
            session=data.get("session") or None,
            status=data.get("status") or None,
            agent=data.get("agent") or None,
            tool=data.get("tool") or None,
            since=data.get("since"),
            until=data.get("until"),
            ended_since=data.get("ended_since"),
            ended_until=data.get("ended_until"),
            stored_since=data.get("stored_since"),
            stored_until=data.get("stored_until"),
            has_refusals=bool(data.get("has_refusals")),
            has_open_asks=bool(data.get("has_open_asks")),
            tool_failed=bool(data.get("tool_failed")),
            text=data.get("q") or None,
        )


class OverviewForm(forms.Form):
    """The overview's query string: the window shown and, optionally, one project. A window that
    does not parse is reported and the default shown, never a 400."""

    window = forms.ChoiceField(
        required=False, choices=[(window.name, window.label) for window in WINDOWS.values()], label="Window"
    )
    project = forms.SlugField(required=False, label="Project")

    def chosen_window(self) -> Window:
        self.is_valid()
        name = getattr(self, "cleaned_data", {}).get("window") if "window" not in self.errors else None
        return WINDOWS[name or DEFAULT_WINDOW]

    def project_slug(self) -> str | None:
        self.is_valid()
        return None if "project" in self.errors else (self.cleaned_data.get("project") or None)


class AskListFilterForm(forms.Form):
    """The ask list's query string (the overview's asks chart links here). A value that does not
    parse is dropped and named, never a 400."""

    project = forms.SlugField(required=False)
    opened_since = forms.DateTimeField(required=False)
    opened_until = forms.DateTimeField(required=False)
    decided_since = forms.DateTimeField(required=False)
    decided_until = forms.DateTimeField(required=False)
    closed_by = forms.ChoiceField(
        required=False,
        choices=[("", "anything"), ("decision", "a decision"), ("deadline", "the deadline")],
        label="closed by",
    )

    def _clean_moment(self, name: str) -> datetime | None:
        return RunFilterForm._storable(self.cleaned_data.get(name))

    def clean_opened_since(self) -> datetime | None:
        return self._clean_moment("opened_since")

    def clean_opened_until(self) -> datetime | None:
        return self._clean_moment("opened_until")

    def clean_decided_since(self) -> datetime | None:
        return self._clean_moment("decided_since")

    def clean_decided_until(self) -> datetime | None:
        return self._clean_moment("decided_until")

    def filters(self) -> ask_selectors.AskWindowFilter:
        self.is_valid()
        data = {k: v for k, v in getattr(self, "cleaned_data", {}).items() if k not in self.errors}
        return ask_selectors.AskWindowFilter(
            project=data.get("project") or None,
            opened_since=data.get("opened_since"),
            opened_until=data.get("opened_until"),
            decided_since=data.get("decided_since"),
            decided_until=data.get("decided_until"),
            closed_by=data.get("closed_by") or None,
        )


class AuditBundleUploadForm(forms.Form):
    """A bundle file and the project whose stored chain it is checked against."""

    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None)
    bundle = forms.FileField(label="Bundle (agentfootprint.audit/1 JSON, or drained segments)")

    def __init__(self, *args: Any, projects: Any, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects  # type: ignore[attr-defined]
        self.max_bytes = max_bytes

    def clean_bundle(self) -> bytes:
        upload = self.cleaned_data["bundle"]
        if upload.size > self.max_bytes:
            raise forms.ValidationError(f"The bundle is {upload.size} bytes; the limit is {self.max_bytes} bytes.")
        return bytes(upload.read())


class RefusalFilterForm(forms.Form):
    """Query-string filters. A value that does not parse is dropped (and reported), never a 400."""

    project = forms.SlugField(required=False)
    category = forms.ChoiceField(choices=[("", "any"), *Refusal.Category.choices], required=False)
    # Rules, tools and agents are stored whole, however long: a filter by one is never dropped for its length.
    rule = forms.CharField(required=False)
    tool = forms.CharField(required=False)
    agent = forms.CharField(required=False)
    since = forms.DateTimeField(required=False)
    until = forms.DateTimeField(required=False)

    def filters(self) -> refusal_selectors.RefusalFilter:
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return refusal_selectors.RefusalFilter(
            project=data.get("project") or None,
            category=data.get("category") or None,
            rule=data.get("rule") or None,
            tool=data.get("tool") or None,
            agent=data.get("agent") or None,
            since=data.get("since"),
            until=data.get("until"),
        )


class RunRetentionForm(forms.Form):
    keep_days = forms.IntegerField(
        required=False,
        min_value=LedgerRetention.MIN_DAYS,
        max_value=LedgerRetention.MAX_DAYS,
        label="Keep runs for (days after their last event)",
        help_text="Empty: runs are kept forever.",
    )


class RunHoldForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"placeholder": "why this run is evidence"}))


class ArchiveUploadForm(forms.Form):
    archive = forms.FileField(label="Archive (the run's audit bundle, as retention wrote it)")

    def __init__(self, *args: Any, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes

    def clean_archive(self) -> bytes:
        upload = self.cleaned_data["archive"]
        if upload.size > self.max_bytes:
            raise forms.ValidationError(f"The archive is {upload.size} bytes; the limit is {self.max_bytes} bytes.")
        return bytes(upload.read())


class NotificationChannelForm(forms.Form):
    """A project's notification channel, as its admin sets it (ledger.asks.notifications)."""

    name = forms.CharField(max_length=60, help_text="What escalation steps notify, e.g. on-call.")
    kind = forms.ChoiceField(choices=NotificationChannel.Kind.choices)
    target = forms.CharField(max_length=2000, help_text="Email addresses, comma-separated, or the webhook's https URL.")
    on_new_ask = forms.BooleanField(required=False, initial=True, label="new asks")
    on_deadline = forms.BooleanField(required=False, initial=True, label="approaching deadlines")
    include_payload = forms.BooleanField(
        required=False, label="include the call's arguments (off: agent, tool and question only)"
    )


class DeadlineRuleForm(forms.Form):
    """A project's deadline rule for one tool or one middleware (ledger.asks.deadline_rules)."""

    tool_name = forms.CharField(required=False, max_length=200, label="tool")
    middleware = forms.CharField(required=False, max_length=200, help_text="Instead of a tool: a middleware's asks.")
    deadline_minutes = forms.IntegerField(min_value=1, label="deadline (minutes after the ask opens)")
    on_timeout = forms.ChoiceField(choices=[("decline", "decline"), ("approve", "approve")], label="at the deadline")
    note = forms.CharField(required=False, max_length=2000, help_text="What the agent is told with the default.")
    escalation = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One step a line: after 10 min notify on-call.",
    )


class ApproverGroupForm(forms.Form):
    name = forms.CharField(max_length=64, widget=forms.TextInput(attrs={"placeholder": "treasury"}))


class ApproverMemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Person (username)")


class ApprovalRuleForm(forms.Form):
    tool_name = forms.CharField(
        max_length=200, label="Tool", widget=forms.TextInput(attrs={"placeholder": "transfer_funds"})
    )
    group = forms.CharField(max_length=64, label="Group")
    quorum = forms.IntegerField(min_value=1, max_value=10, initial=1, label="Different people needed")
    conditions = forms.CharField(
        required=False,
        max_length=2000,
        label="Only calls whose arguments meet (one a line; empty: every call)",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "amount > 1000"}),
    )


class StandingLimitsForm(forms.Form):
    max_minutes = forms.IntegerField(
        min_value=0, max_value=7 * 24 * 60, label="Longest standing approval (minutes; 0 turns them off)"
    )
    allow_any_agent = forms.BooleanField(required=False, label="may cover any agent of the project")


class StandingGrantForm(forms.Form):
    """'Approve this and the same calls for the next N minutes': the pattern starts as the ask's
    arguments, exactly; the person may turn a number into bounds, never drop an argument."""

    minutes = forms.IntegerField(min_value=1, label="for the next (minutes)")
    pattern = forms.CharField(
        max_length=20_000,
        label='Calls whose arguments match (JSON: each argument its value, or {"min": …, "max": …} for a number)',
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    agent = forms.ChoiceField(choices=[("same", "from this agent"), ("any", "from any agent of the project")])
    note = forms.CharField(required=False, max_length=2000)

    def clean_pattern(self) -> Any:
        try:
            return parse_json(self.cleaned_data["pattern"].encode())
        except MalformedBody:
            raise forms.ValidationError("pattern: this is not valid JSON.") from None
