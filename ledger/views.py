"""Human pages. GET-only here: auditors read; later pages (asks) add their own POST views."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from footprint_site.pages import HtmxHttpRequest, int_param, wants_partial
from ledger import selectors
from ledger.exceptions import RunNotFound
from ledger.forms import RunFilterForm
from ledger.models import Run

RUNS_PER_PAGE = 50
EVENTS_PER_PAGE = 100


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    runs = selectors.run_list(
        projects=selectors.projects_for_user(request.user),
        filters=form.filters(),
        before_id=selectors.decode_cursor(request.GET.get("cursor")),
        limit=RUNS_PER_PAGE,
    )
    next_cursor = selectors.encode_cursor(runs[RUNS_PER_PAGE - 1].pk) if len(runs) > RUNS_PER_PAGE else None
    kept = request.GET.copy()
    kept.pop("cursor", None)
    template = "ledger/run_list.html" + ("#run-page" if wants_partial(request) else "")
    return render(
        request,
        template,
        {"runs": runs[:RUNS_PER_PAGE], "next_cursor": next_cursor, "form": form, "filter_query": kept.urlencode()},
    )


def _run_or_404(request: HttpRequest, project_slug: str, run_id: str) -> Run:
    try:
        return selectors.run_get_for_user(user=request.user, project_slug=project_slug, run_id=run_id)
    except RunNotFound as exc:
        raise Http404(exc.message) from None


def _events_context(run: Run, after_seq: int) -> dict[str, object]:
    events = selectors.run_events_page(run=run, after_seq=after_seq, limit=EVENTS_PER_PAGE)
    return {
        "run": run,
        "events": events[:EVENTS_PER_PAGE],
        "next_after_seq": events[EVENTS_PER_PAGE - 1].seq if len(events) > EVENTS_PER_PAGE else None,
    }


@require_GET
@login_required
def run_detail(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    run = _run_or_404(request, project_slug, run_id)
    return render(
        request, "ledger/run_detail.html", {**_events_context(run, after_seq=-1), **selectors.run_overview(run=run)}
    )


@require_GET
@login_required
def run_integrity(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """Re-walk the run's hash chain now and show the verdict (the panel, or the whole page)."""
    run = _run_or_404(request, project_slug, run_id)
    context = {"run": run, "verdict": selectors.run_chain_verify(run=run)}
    if wants_partial(request):
        return render(request, "ledger/run_detail.html#integrity", context)
    return render(
        request,
        "ledger/run_detail.html",
        {**context, **_events_context(run, after_seq=-1), **selectors.run_overview(run=run)},
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_events(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """The next page of a run's events: rows for htmx, the whole page otherwise."""
    run = _run_or_404(request, project_slug, run_id)
    template = "ledger/run_detail.html" + ("#event-page" if wants_partial(request) else "")
    return render(request, template, _events_context(run, after_seq=int_param(request, "after_seq", -1)))
