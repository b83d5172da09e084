"""Human pages. GET-only here: auditors read; later pages (asks) add their own POST views."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers

from footprint_site.pages import (
    HTMX_HEADERS,
    HtmxHttpRequest,
    filtered_by,
    int_param,
    signed_in_user,
    varies_with_htmx,
    wants_partial,
)
from footprint_site.replicas import reads_that_may_lag
from ledger.audits import integrity
from ledger.audits.integrity_selectors import integrity_check_latest, project_anchors_audit
from ledger.exceptions import RunNotFound
from ledger.explorer import run_page, selectors, waterfall
from ledger.forms import RunFilterForm, RunHoldForm
from ledger.framework.canonical_notes import canonical_notes
from ledger.models import IntegrityCheck, Run
from ledger.retention import selectors as retention_selectors
from tenancy import selectors as tenancy_selectors

RUNS_PER_PAGE = 50


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    page = selectors.run_list(
        projects=tenancy_selectors.projects_for_user(request.user),
        filters=form.filters(),
        cursor=request.GET.get("cursor"),
        limit=RUNS_PER_PAGE,
    )
    template = "ledger/run_list.html" + ("#run-page" if wants_partial(request) else "")
    context = {
        "runs": page.items,
        "next_cursor": page.next_cursor,
        "form": form,
        "filtered": filtered_by(request, RunFilterForm.base_fields),
        "first_page": not request.GET.get("cursor"),
    }
    return render(request, template, context)


def _run_or_404(request: HttpRequest, project_slug: str, run_id: str) -> Run:
    try:
        return selectors.run_get_for_user(user=request.user, project_slug=project_slug, run_id=run_id)
    except RunNotFound as exc:
        raise Http404(exc.message) from None


# The run page's tabs, in the order shown. Each is a URL of its own (shareable, works without
# JavaScript); htmx swaps only the panel.
TABS = {
    "waterfall": "Waterfall",
    "timeline": "Timeline",
    "tree": "Tree",
    "tools": "Tool calls",
    "verdicts": "Verdicts",
    "refusals": "Refusals",
    "artifacts": "Artifacts",
    "asks": "Asks",
    "spans": "Spans",
}


def _timeline_context(run: Run, after_seq: int) -> dict[str, object]:
    page = run_page.run_timeline_page(run=run, after_seq=after_seq)
    return {
        "events": page.items,
        "next_after_seq": page.next_after,
        # Reversed once per page: each row's drawer link is this plus its position.
        "events_url": reverse("ledger:run-events", args=[run.project.slug, run.run_id]),
    }


class WindowNotWhole(ValueError):
    """A waterfall window bound that is not whole milliseconds; its message names the field."""


def _window_param(request: HttpRequest, name: str) -> int | None:
    """`from`/`to` of the waterfall's window: whole milliseconds from the run's start, or absent."""
    value = request.GET.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise WindowNotWhole(
            f"The waterfall's '{name}' must be a whole number of milliseconds from the run's start, not {value[:40]!r}."
        ) from None


def _waterfall_context(request: HtmxHttpRequest, run: Run) -> dict[str, object]:
    # The timeline's first page comes too: without JavaScript the tab reads as the timeline table.
    chart = waterfall.run_waterfall(run=run, from_ms=_window_param(request, "from"), to_ms=_window_param(request, "to"))
    if wants_partial(request) and request.htmx.target == "waterfall":
        # A zoom swaps the chart alone: the timeline behind it is on the page already.
        return {"waterfall": chart, "events_url": reverse("ledger:run-events", args=[run.project.slug, run.run_id])}
    return {"waterfall": chart, **_timeline_context(run, after_seq=-1)}


def _dispatch_context(run: Run, after_id: int) -> dict[str, object]:
    page = run_page.run_dispatches(run=run, after_id=after_id)
    heading = canonical_notes().coverage_heading
    return {"dispatches": page.items, "next_dispatch_after": page.next_after, "coverage_heading": heading}


def _tab_context(request: HtmxHttpRequest, run: Run, tab: str) -> dict[str, object]:
    """Only the open tab's data is read: a 100,000-event run costs one page, not the run."""
    if tab == "waterfall":
        return _waterfall_context(request, run)
    if tab == "timeline":
        return _timeline_context(run, after_seq=int_param(request, "after_seq", -1))
    if tab == "tree":
        return {"tree": run_page.run_tree(run=run)}
    if tab == "tools":
        return _dispatch_context(run, after_id=int_param(request, "after", 0))
    if tab == "verdicts":
        return run_page.run_verdicts_page(run=run, after_seq=int_param(request, "after_seq", -1))
    if tab == "refusals":
        return run_page.run_refusals_page(run=run, after_seq=int_param(request, "after_seq", -1))
    if tab == "artifacts":
        return run_page.run_artifact_activity(run=run, after_seq=int_param(request, "after_seq", -1))
    if tab == "asks":
        return run_page.run_asks_page(run=run, after_id=int_param(request, "after", 0))
    return run_page.run_otlp_spans_page(run=run, after_number=int_param(request, "after", -1))


def _run_page(request: HtmxHttpRequest, run: Run, tab: str, extra: dict[str, object] | None = None) -> HttpResponse:
    context = {"run": run, "tab": tab, "tabs": TABS, **_tab_context(request, run, tab), **(extra or {})}
    if wants_partial(request) and request.htmx.target == "run-tabs":
        return render(request, "ledger/run_detail.html#tab-panel", context)
    if wants_partial(request) and request.htmx.target == "waterfall" and tab == "waterfall":
        return render(request, "ledger/run_detail.html#waterfall", context)
    context["header"] = header = run_page.run_header(run=run)
    context.setdefault("check", header.integrity)
    context.update(retention_selectors.run_hold_panel(user=request.user, project=run.project, run_id=run.run_id))
    context["hold_form"] = RunHoldForm()
    return render(request, "ledger/run_detail.html", context)


@require_GET
@login_required
@vary_on_headers(*HTMX_HEADERS, "HX-Target")
@reads_that_may_lag
def run_detail(request: HtmxHttpRequest, project_slug: str, run_id: str, tab: str = "waterfall") -> HttpResponse:
    if tab not in TABS:
        raise Http404(f"The run page has no tab '{tab}'.")
    try:
        run = selectors.run_get_for_user(user=request.user, project_slug=project_slug, run_id=run_id)
    except RunNotFound as exc:
        if retention_selectors.tombstone_for_user(user=request.user, project_slug=project_slug, run_id=run_id):
            return redirect("retention:removed-run", project_slug=project_slug, run_id=run_id)
        raise Http404(exc.message) from None
    try:
        return _run_page(request, run, tab)
    except WindowNotWhole as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def run_events(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """The next page of the timeline: rows for htmx (infinite scroll), the whole page otherwise."""
    run = _run_or_404(request, project_slug, run_id)
    if wants_partial(request):
        context = {"run": run, **_timeline_context(run, after_seq=int_param(request, "after_seq", -1))}
        return render(request, "ledger/run_detail.html#event-page", context)
    return _run_page(request, run, "timeline")


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def run_dispatches(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """The next tool calls of the tool-call tab (htmx), or the whole page."""
    run = _run_or_404(request, project_slug, run_id)
    if wants_partial(request):
        context = {"run": run, **_dispatch_context(run, after_id=int_param(request, "after", 0))}
        return render(request, "ledger/run_detail.html#dispatch-page", context)
    return _run_page(request, run, "tools")


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def run_event(request: HtmxHttpRequest, project_slug: str, run_id: str, position: int) -> HttpResponse:
    """One record of the chain in the drawer: its payload and meta (escaped), and its hashes."""
    run = _run_or_404(request, project_slug, run_id)
    event = run_page.run_event_get(run=run, position=position)
    if event is None:
        raise Http404(f"Run '{run_id}' has no record at position {position}.")
    template = "ledger/event_detail.html" + ("#drawer" if wants_partial(request) else "")
    return render(request, template, {"run": run, "event": event})


@require_http_methods(["GET", "POST"])
@varies_with_htmx
@login_required
@reads_that_may_lag
def run_integrity(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """GET: the latest re-check of the run's chain. POST: start a new one (short chains are
    walked at once, long ones by a worker whose progress the panel polls)."""
    run = _run_or_404(request, project_slug, run_id)
    check: IntegrityCheck | None
    if request.method == "POST":
        check = integrity.integrity_check_request(run=run, user=signed_in_user(request))
        if not wants_partial(request):
            return redirect("ledger:run-detail", project_slug, run_id)
    else:
        check = integrity_check_latest(run=run)
    if wants_partial(request):
        return render(request, "ledger/run_detail.html#integrity", {"run": run, "check": check})
    return _run_page(request, run, "waterfall", {"check": check})


@require_GET
@login_required
@reads_that_may_lag
def project_anchors(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    """The project's signed chain anchors checked as a whole, including runs deleted outright."""
    found = tenancy_selectors.project_get_for_user(user=request.user, slug=project_slug)
    if found is None:
        raise Http404(f"No project '{project_slug}'.")
    project, _ = found
    return render(request, "ledger/anchors.html", {"project": project, "audit": project_anchors_audit(project=project)})
