"""The page of a project's admin changes, for its admins (and superusers)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from footprint_site.pages import HtmxHttpRequest, project_for_admin, varies_with_htmx, wants_partial
from tenancy.selectors import admin_change_list_for_project

PER_PAGE = 50


@require_GET
@login_required
@varies_with_htmx
def project_changes(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project = project_for_admin(request, project_slug, "Only admins of this project may see its admin changes.")
    cursor = request.GET.get("cursor")
    page = admin_change_list_for_project(project=project, cursor=cursor, limit=PER_PAGE)
    context = {
        "project": project,
        "is_admin": True,
        "changes": page.items,
        "paged": bool(cursor),
        "next_cursor": page.next_cursor,
    }
    template = "tenancy/project_changes.html" + ("#change-page" if wants_partial(request) else "")
    return render(request, template, context)
