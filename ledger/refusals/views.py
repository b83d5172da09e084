"""The refusal tracer: every refusal of the user's projects, and the walk from one back to its cause.

GET-only. Any member of a project (auditors included) may read its refusals; another project's
refusal is a 404.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from footprint_site.pages import HtmxHttpRequest, filtered_by, varies_with_htmx, wants_partial
from footprint_site.replicas import reads_that_may_lag
from ledger.exceptions import RefusalNotFound
from ledger.forms import RefusalFilterForm
from ledger.models import Refusal
from ledger.refusals import selectors

REFUSALS_PER_PAGE = 50
FILTER_FIELDS = ("project", "category", "rule", "tool", "agent", "since", "until")


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def refusal_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RefusalFilterForm(request.GET)
    filters = form.filters()
    page = selectors.refusal_list(
        user=request.user, filters=filters, cursor=request.GET.get("cursor"), limit=REFUSALS_PER_PAGE
    )
    context: dict[str, object] = {
        "refusals": page.items,
        "next_cursor": page.next_cursor,
        "form": form,
        "categories": Refusal.Category.choices,
        "filters": {name: request.GET.get(name, "") for name in FILTER_FIELDS},
        "filtered": filtered_by(request, FILTER_FIELDS),
        "first_page": not request.GET.get("cursor"),
    }
    if wants_partial(request):
        # A paging request only needs the next rows; a filter submit swaps the whole results region.
        partial = "refusal-page" if request.GET.get("cursor") else "refusal-results"
        if partial == "refusal-results":
            context.update(_summary_context(request, filters))
        return render(request, f"refusals/refusal_list.html#{partial}", context)
    context.update(_summary_context(request, filters))
    return render(request, "refusals/refusal_list.html", context)


def _summary_context(request: HtmxHttpRequest, filters: selectors.RefusalFilter) -> dict[str, object]:
    return {
        "groups": selectors.refusal_groups(user=request.user, filters=filters),
        "repeats": selectors.refusal_repeat_offences(user=request.user, filters=filters),
    }


@require_GET
@login_required
@reads_that_may_lag
def refusal_detail(request: HtmxHttpRequest, refusal_id: int) -> HttpResponse:
    try:
        chain = selectors.refusal_chain(user=request.user, refusal_id=refusal_id)
    except RefusalNotFound as exc:
        raise Http404(exc.message) from None
    return render(request, "refusals/refusal_detail.html", {"chain": chain, "refusal": chain.refusal})
