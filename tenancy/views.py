"""The page of a project's admin changes, for its admins (and superusers)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from footprint_site.pages import HtmxHttpRequest, signed_in_user, varies_with_htmx, wants_partial
from footprint_site.pagination import decode_cursor, encode_cursor
from tenancy.models import Membership
from tenancy.selectors import admin_change_list_for_project, project_get_for_user

PER_PAGE = 50


@require_GET
@login_required
@varies_with_htmx
def project_changes(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    found = project_get_for_user(user=signed_in_user(request), slug=project_slug)
    if found is None:
        raise Http404("No such project.")
    project, role = found
    if role != Membership.Role.ADMIN:
        return HttpResponse("Only admins of this project may see its admin changes.", status=403)
    cursor = request.GET.get("cursor")
    rows = admin_change_list_for_project(project=project, before_id=decode_cursor(cursor), limit=PER_PAGE)
    context = {
        "project": project,
        "is_admin": True,
        "changes": rows[:PER_PAGE],
        "paged": bool(cursor),
        "next_cursor": encode_cursor(rows[PER_PAGE - 1].pk) if len(rows) > PER_PAGE else None,
    }
    template = "tenancy/project_changes.html" + ("#change-page" if wants_partial(request) else "")
    return render(request, template, context)
