"""The overview page: the signed-in home. GET-only; any member of a project reads its overview."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from footprint_site.pages import HtmxHttpRequest, varies_with_htmx, wants_partial
from footprint_site.replicas import reads_that_may_lag
from ledger.forms import OverviewForm
from ledger.overview import charts, selectors
from tenancy import selectors as tenancy_selectors


@require_GET
@login_required
@varies_with_htmx
@reads_that_may_lag
def overview(request: HtmxHttpRequest) -> HttpResponse:
    form = OverviewForm(request.GET)
    window, slug = form.chosen_window(), form.project_slug()
    projects = list(tenancy_selectors.projects_for_user(request.user).order_by("slug"))
    shown = projects
    if slug is not None:
        shown = [project for project in projects if project.slug == slug]
        if not shown:
            raise Http404(f"No project '{slug}' among yours.")
    figures = selectors.overview_get(projects=shown, window=window)
    context = {
        "form": form,
        "projects": projects,
        "project_slug": slug,
        "windows": selectors.WINDOWS.values(),
        "window": window,
        "overview": figures,
        "charts": charts.overview_charts(figures, project_slug=slug),
        "rollup_seconds": settings.CELERY_BEAT_SCHEDULE["rollups"]["schedule"],
    }
    template = "overview/overview.html" + ("#overview-figures" if wants_partial(request) else "")
    return render(request, template, context)
