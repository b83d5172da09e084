"""Audit bundles in the browser: upload one to verify it, and browse the bundles stored.

Any member of a project may verify a bundle against it; only its admins store what they upload
(auditors are read-only). Another project's bundle is a 404.
"""

from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from footprint_site.exceptions import ApiError
from footprint_site.pages import HtmxHttpRequest, varies_with_htmx, wants_partial
from footprint_site.replicas import reads_that_may_lag
from ledger.audits import selectors
from ledger.audits.services import audit_bundle_import
from ledger.exceptions import RunNotFound
from ledger.explorer import selectors as explorer_selectors
from ledger.forms import AuditBundleUploadForm
from tenancy import selectors as tenancy_selectors
from tenancy.models import Membership

BUNDLES_PER_PAGE = 100


@require_http_methods(["GET", "POST"])
@login_required
@varies_with_htmx
@reads_that_may_lag
def bundle_list(request: HtmxHttpRequest) -> HttpResponse:
    """The stored bundles of the user's projects, a page at a time, and the upload form; a POST
    shows its verdict. An htmx GET (the "Older bundles" link) gets only the next rows."""
    form = AuditBundleUploadForm(
        request.POST or None,
        request.FILES or None,
        projects=tenancy_selectors.projects_for_user(request.user).order_by("slug"),
        max_bytes=settings.FOOTPRINT_MAX_RECORDING_BYTES,
    )
    context: dict[str, Any] = {"form": form}
    status = 422 if request.method == "POST" else 200
    if request.method == "POST" and form.is_valid():
        try:
            context.update(_verdict_of_upload(request, form.cleaned_data["project"], form.cleaned_data["bundle"]))
            status = 200
        except ApiError as exc:
            form.add_error("bundle", exc.message)
    page = selectors.audit_bundles_for_user(user=request.user, cursor=request.GET.get("cursor"), limit=BUNDLES_PER_PAGE)
    context["bundles"] = page.items
    context["next_cursor"] = page.next_cursor
    if request.method == "GET" and wants_partial(request):
        return render(request, "audits/bundles.html#bundle-page", context)
    return render(request, "audits/bundles.html", context, status=status)


def _verdict_of_upload(request: HtmxHttpRequest, project: Any, body: bytes) -> dict[str, Any]:
    stored = None
    if tenancy_selectors.role_of(user=request.user, project=project) == Membership.Role.ADMIN:
        stored, _ = audit_bundle_import(project=project, body=body)
        verdict = stored.verdict
    else:
        verdict = selectors.audit_bundle_verdict(project=project, body=body).verdict
    return {
        "project": project,
        "stored": stored,
        "verdict": verdict,
        "broken": selectors.audit_bundle_broken_record(body=body, verdict=verdict),
    }


@require_GET
@login_required
@reads_that_may_lag
def bundle_detail(request: HtmxHttpRequest, bundle_id: int) -> HttpResponse:
    bundle = selectors.audit_bundle_get_for_user(user=request.user, bundle_id=bundle_id)
    if bundle is None:
        raise Http404(f"No audit bundle {bundle_id} in your projects.")
    verdict, edited = selectors.audit_bundle_stored_verdict(bundle=bundle)
    broken = selectors.audit_bundle_broken_record(body=bytes(bundle.body), verdict=verdict)
    context = {"bundle": bundle, "verdict": verdict, "broken": broken, "edited": edited}
    return render(request, "audits/bundle_detail.html", context)


@require_GET
@login_required
def run_audit_bundle(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """The run's audit bundle as a download for any member of its project (auditors first among
    them): the selector and the JSON writer the API's export uses, so the bytes are the API's."""
    try:
        run = explorer_selectors.run_get_for_user(user=request.user, project_slug=project_slug, run_id=run_id)
    except RunNotFound as exc:
        raise Http404(exc.message) from None
    response = HttpResponse(orjson.dumps(selectors.run_audit_bundle(run=run)), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{_download_name(run.run_id)}.audit.json"'
    return response


def _download_name(run_id: str) -> str:
    """A run id as a file name: letters, digits, dots, dashes and underscores kept, the rest '_'."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in run_id)[:120] or "run"
