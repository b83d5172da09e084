"""Pages of retention: a removed run (its tombstone, its archive checked), legal holds on a run,
and a project's run retention (admins)."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from footprint_site.login_redirects import login_required_returning_to
from footprint_site.pages import HtmxHttpRequest, project_for_admin, signed_in_user, wants_partial
from ledger.forms import ArchiveUploadForm, RunHoldForm, RunRetentionForm
from ledger.retention import archive, selectors, services
from tenancy.models import Membership, Project
from tenancy.selectors import project_get_for_user
from tenancy.services import Actor

HOLDERS = (Membership.Role.AUDITOR, Membership.Role.ADMIN)
ADMINS_ONLY = "Only admins of this project may change how long its runs are kept."


def _project(request: HtmxHttpRequest, slug: str) -> tuple[Project, str]:
    found = project_get_for_user(user=signed_in_user(request), slug=slug)
    if found is None:
        raise Http404("No such project.")
    return found


@require_http_methods(["GET", "POST"])
@login_required
def removed_run(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    """What retention removed and where its archive went; a POST checks an archive against the
    tombstone: an uploaded file, or (no file) the one in the store."""
    project, _ = _project(request, project_slug)
    tombstone = selectors.tombstone_latest(project=project, run_id=run_id)
    if tombstone is None:
        raise Http404("No run of this id was removed from this project.")
    form = ArchiveUploadForm(max_bytes=settings.FOOTPRINT_MAX_RECORDING_BYTES)
    context: dict[str, object] = {"project": project, "tombstone": tombstone, "form": form}
    if request.method == "POST":
        form = ArchiveUploadForm(request.POST, request.FILES, max_bytes=settings.FOOTPRINT_MAX_RECORDING_BYTES)
        context["form"] = form
        if request.FILES:
            if form.is_valid():
                context["check"] = selectors.archive_check(tombstone=tombstone, body=form.cleaned_data["archive"])
                context["checked"] = "the uploaded file"
        else:
            try:
                body = archive.archive_get(tombstone.archive_location)
            except archive.ArchiveUnavailable as exc:
                context["store_problem"] = str(exc)
            else:
                context["check"] = selectors.archive_check(tombstone=tombstone, body=body)
                context["checked"] = "the archive in the store"
    template = "retention/removed_run.html" + ("#archive-check" if wants_partial(request) else "")
    return render(request, template, context)


@require_POST
@login_required_returning_to("ledger:run-detail", "project_slug", "run_id")
def run_hold(request: HtmxHttpRequest, project_slug: str, run_id: str) -> HttpResponse:
    project, role = _project(request, project_slug)
    if not selectors.run_exists(project=project, run_id=run_id):
        raise Http404("No such run in this project.")
    if role not in HOLDERS:
        raise PermissionDenied("Only auditors and admins of this project may hold runs.")
    form = RunHoldForm(request.POST)
    problem = None
    if form.is_valid():
        try:
            services.run_hold_place(
                project=project,
                run_id=run_id,
                reason=form.cleaned_data["reason"],
                actor=Actor.of_user(signed_in_user(request)),
            )
        except ValueError as exc:
            problem = str(exc)
    else:
        problem = "reason: say why the run is held (a case number, a request), in a few words."
    return _hold_panel(request, project, run_id, problem)


@require_POST
@login_required_returning_to("ledger:run-detail", "project_slug", "run_id")
def run_hold_release(request: HtmxHttpRequest, project_slug: str, run_id: str, hold_id: int) -> HttpResponse:
    project, role = _project(request, project_slug)
    if role not in HOLDERS:
        raise PermissionDenied("Only auditors and admins of this project may release holds.")
    hold = next(
        (hold for hold in selectors.run_holds_in_force(project=project, run_id=run_id) if hold.pk == hold_id), None
    )
    if hold is None:
        raise Http404("No such hold in force on this run.")
    services.run_hold_release(hold=hold, actor=Actor.of_user(signed_in_user(request)))
    return _hold_panel(request, project, run_id, None)


def _hold_panel(request: HtmxHttpRequest, project: Project, run_id: str, problem: str | None) -> HttpResponse:
    """The hold line again (htmx), or back to the run page; a refusal without htmx is a page of
    its own saying why (422), with the line to try again."""
    if not wants_partial(request) and problem is None:
        return redirect("ledger:run-detail", project_slug=project.slug, run_id=run_id)
    context = {
        "project": project,
        "run_id": run_id,
        "holds": selectors.run_holds_in_force(project=project, run_id=run_id),
        "may_hold": True,
        "hold_problem": problem,
        "hold_form": RunHoldForm(),
    }
    template = "retention/_run_hold.html" if wants_partial(request) else "retention/run_hold_refused.html"
    # htmx swaps only 2xx answers: the line with its refusal comes back as 200 there.
    return render(request, template, context, status=422 if problem and not wants_partial(request) else 200)


@require_http_methods(["GET", "POST"])
@login_required
def run_retention_edit(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project = project_for_admin(
        request, project_slug, "Only admins of this project may change how long its runs are kept."
    )
    initial = {"keep_days": selectors.run_retention_days(project=project)}
    form = RunRetentionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        services.run_retention_set(
            project=project, keep_days=form.cleaned_data["keep_days"], actor=Actor.of_user(signed_in_user(request))
        )
        return redirect("retention:run-retention", project_slug=project.slug)
    status = 422 if request.method == "POST" else 200
    return render(request, "retention/run_retention.html", {"project": project, "form": form}, status=status)
