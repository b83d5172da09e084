"""Auditor pages for a project's artifacts: list, detail with a safe preview, holds, retention."""

from collections.abc import Iterable
from typing import Any

import orjson
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from artifacts import selectors, services
from artifacts.exceptions import ArtifactNotFound
from artifacts.forms import HoldForm, RetentionForm
from artifacts.kinds import default_result_tool
from artifacts.models import ArtifactHold, ArtifactStore, SweepRun
from artifacts.refs import is_ref
from footprint_site.lib.ids import is_run_id
from footprint_site.login_redirects import login_required_returning_to
from footprint_site.pages import HtmxHttpRequest, filtered_by, signed_in_user, varies_with_htmx, wants_partial
from tenancy.models import Membership, Project
from tenancy.selectors import project_get_for_user

PER_PAGE = 50
HOLDERS = (Membership.Role.AUDITOR, Membership.Role.ADMIN)


def _project(request: HtmxHttpRequest, slug: str) -> tuple[Project, str, ArtifactStore]:
    found = project_get_for_user(user=signed_in_user(request), slug=slug)
    if found is None:
        raise Http404("No such project.")
    project, role = found
    return project, role, services.store_for_project(project=project)


def _run_links(run_ids: Iterable[str | None]) -> set[str]:
    """The origin run ids a page may link to their run. A put refuses any other origin.runId, but a
    row stored before it did is shown unlinked, not as a page that fails to reverse its URL."""
    return {run_id for run_id in run_ids if run_id is not None and is_run_id(run_id)}


@require_GET
@login_required
@varies_with_htmx
def artifact_list(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project, role, store = _project(request, project_slug)
    state = request.GET.get("state", "live")
    if state not in selectors.PAGE_STATES:
        state = "live"
    filters = {key: request.GET.get(key, "") for key in ("kind", "conversation", "run")}
    page = selectors.artifact_list_for_project(
        store=store,
        kind=filters["kind"] or None,
        conversation=filters["conversation"] or None,
        run_id=filters["run"] or None,
        state=state,
        cursor=request.GET.get("cursor"),
        limit=PER_PAGE,
    )
    context = {
        "project": project,
        "store": store,
        "artifacts": page.items,
        "run_links": _run_links(row.origin_run_id for row in page.items),
        "filters": filters,
        "state": state,
        "states": selectors.PAGE_STATES,
        "is_admin": role == Membership.Role.ADMIN,
        "next_cursor": page.next_cursor,
        "filtered": filtered_by(request, filters) or state != "live",
        "first_page": not request.GET.get("cursor"),
        # A sweep covers every project's store: its figures are the operators' (superusers), not
        # a project's members', who would read other tenants' activity in them.
        "sweeps": SweepRun.objects.order_by("-started_at")[:5] if signed_in_user(request).is_superuser else None,
    }
    template = "artifacts/artifact_list.html" + ("#artifact-page" if wants_partial(request) else "")
    return render(request, template, context)


def _detail_context(request: HtmxHttpRequest, project_slug: str, ref: str) -> dict[str, Any]:
    project, role, store = _project(request, project_slug)
    view = selectors.artifact_view_for_project(store=store, ref=ref)
    if view is None:
        raise Http404("No such artifact in this project.")
    artifact = view.artifact
    return {
        "project": project,
        "ref": ref,
        "view": view,
        "artifact": artifact,
        "result_tool": default_result_tool(artifact.kind) if artifact else None,
        "meta_json": orjson.dumps(artifact.meta(), option=orjson.OPT_INDENT_2).decode() if artifact else None,
        "preview": selectors.payload_preview(view) if artifact else None,
        "run_links": _run_links([artifact.origin_run_id] if artifact else []),
        "holds": ArtifactHold.objects.filter(store=store, artifact_ref=ref).select_related("placed_by", "released_by"),
        "can_hold": role in HOLDERS and artifact is not None,
        "hold_form": HoldForm(),
    }


@require_GET
@login_required
def artifact_detail(request: HtmxHttpRequest, project_slug: str, ref: str) -> HttpResponse:
    return render(request, "artifacts/artifact_detail.html", _detail_context(request, project_slug, ref))


@require_GET
@login_required
def artifact_download(request: HtmxHttpRequest, project_slug: str, ref: str) -> HttpResponse:
    """The raw bytes as an attachment of a neutral type: stored content never renders in the site."""
    context = _detail_context(request, project_slug, ref)
    body = context["view"].body
    if body is None or context["view"].digest_status == "mismatch":
        raise Http404("This artifact's bytes are not available.")
    response = HttpResponse(body, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{ref}.bin"'
    return response


def _hold_panel(
    request: HtmxHttpRequest, project_slug: str, ref: str, invalid_form: HoldForm | None = None
) -> HttpResponse:
    """The hold panel again (htmx) or the artifact page; with the form's errors, a 422 page."""
    if invalid_form is None and not wants_partial(request):
        return redirect("artifacts:artifact-detail", project_slug=project_slug, ref=ref)
    context = _detail_context(request, project_slug, ref)
    if invalid_form is not None:
        context["hold_form"] = invalid_form
    template = "artifacts/artifact_detail.html" + ("#hold-panel" if wants_partial(request) else "")
    # htmx swaps only 2xx answers, so the panel with the form's errors comes back as 200 there.
    status = 422 if invalid_form is not None and not wants_partial(request) else 200
    return render(request, template, context, status=status)


@require_POST
@login_required_returning_to("artifacts:artifact-detail", "project_slug", "ref")
def artifact_hold(request: HtmxHttpRequest, project_slug: str, ref: str) -> HttpResponse:
    _, role, store = _project(request, project_slug)
    if role not in HOLDERS:
        raise PermissionDenied("Only auditors and admins of this project may hold artifacts.")
    form = HoldForm(request.POST)
    if not form.is_valid():
        return _hold_panel(request, project_slug, ref, invalid_form=form)
    try:
        services.artifact_hold_place(
            store=store, ref=ref, user=signed_in_user(request), reason=form.cleaned_data["reason"]
        )
    except ArtifactNotFound:
        raise Http404("No such artifact in this project.") from None
    return _hold_panel(request, project_slug, ref)


@require_POST
@login_required_returning_to("artifacts:artifact-detail", "project_slug", "ref")
def artifact_hold_release(request: HtmxHttpRequest, project_slug: str, ref: str, hold_id: int) -> HttpResponse:
    _, role, store = _project(request, project_slug)
    if role not in HOLDERS:
        raise PermissionDenied("Only auditors and admins of this project may release holds.")
    request.POST  # noqa: B018 - reading the form enforces the size and field-count limits
    hold = ArtifactHold.objects.filter(pk=hold_id, store=store, artifact_ref=ref).first() if is_ref(ref) else None
    if hold is None:
        raise Http404("No such hold.")
    services.artifact_hold_release(hold=hold, user=signed_in_user(request))
    return _hold_panel(request, project_slug, ref)


@require_http_methods(["GET", "POST"])
@login_required
def retention_edit(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project, role, store = _project(request, project_slug)
    if role != Membership.Role.ADMIN:
        raise PermissionDenied("Only admins of this project may change its retention.")
    form = RetentionForm(request.POST or None, instance=store)
    if request.method == "POST" and form.is_valid():
        services.store_update_retention(store=store, user=signed_in_user(request), **form.cleaned_data)
        return redirect("artifacts:artifact-list", project_slug=project.slug)
    status = 422 if request.method == "POST" else 200
    return render(request, "artifacts/retention.html", {"project": project, "form": form}, status=status)
