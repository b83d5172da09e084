"""The ask inbox and the ask page: people decide what paused runs wait for."""

from typing import Any
from urllib.parse import urlencode

import orjson
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from footprint_site.login_redirects import login_required_returning_to
from footprint_site.pages import HtmxHttpRequest, filtered_by, signed_in_user, varies_with_htmx, wants_partial
from footprint_site.replicas import reads_that_may_lag
from ledger.asks import approver_selectors
from ledger.asks import selectors as ask_selectors
from ledger.asks import services as ask_services
from ledger.exceptions import AskAlreadyDecided, AskInvalid, AskNotFound, AskNotPermitted, AskOwnDecision
from ledger.forms import AskListFilterForm, DecisionForm, StandingGrantForm
from ledger.models import Ask, WebhookDelivery
from tenancy.models import DECIDING_ROLES
from tenancy.selectors import projects_for_user

ASKS_PER_PAGE = 25
ASK_LIST_PER_PAGE = 50
# componentId → template; anything else falls back to a readable rendering of its props.
COMPONENTS = {"approval-card": "asks/components/approval_card.html"}


@require_GET
@login_required
@varies_with_htmx
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    page = ask_selectors.inbox_open_asks(user=request.user, cursor=request.GET.get("cursor"), limit=ASKS_PER_PAGE)
    for ask in page.items:
        ask.approving_does = ask_selectors.APPROVING_DOES.get(ask.kind)  # type: ignore[attr-defined]
    context = {
        "asks": page.items,
        "next_cursor": ask_selectors.urgency_cursor(page),
        "first_page": not request.GET.get("cursor"),
        "now": timezone.now(),
    }
    template = "asks/inbox.html" + ("#ask-list" if wants_partial(request) else "")
    return render(request, template, context)


ASK_LIST_FILTERS = ("project", "opened_since", "opened_until", "decided_since", "decided_until", "closed_by")


@require_GET
@login_required
@reads_that_may_lag
def ask_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every ask of the person's projects, decided or not, filtered by when it was opened or
    decided and how it closed: the rows behind the overview's asks chart."""
    form = AskListFilterForm(request.GET)
    filters = form.filters()
    if filters.project and not projects_for_user(request.user).filter(slug=filters.project).exists():
        raise Http404(f"No project '{filters.project}' among yours.")
    page = ask_selectors.asks_for_user(
        user=request.user, filters=filters, cursor=request.GET.get("cursor"), limit=ASK_LIST_PER_PAGE
    )
    kept = {name: request.GET[name] for name in ASK_LIST_FILTERS if request.GET.get(name)}
    context = {
        "asks": page.items,
        "form": form,
        "filters": {name: request.GET.get(name, "") for name in ASK_LIST_FILTERS},
        "filtered": filtered_by(request, ASK_LIST_FILTERS),
        "next_query": urlencode({**kept, "cursor": page.next_cursor}) if page.next_cursor else None,
    }
    return render(request, "asks/ask_list.html", context)


def _pretty(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _page_context(
    request: HtmxHttpRequest,
    ask_id: int,
    form: DecisionForm | None = None,
    standing_form: StandingGrantForm | None = None,
) -> dict[str, Any]:
    try:
        ask, role = ask_selectors.ask_get_for_user(user=request.user, ask_id=ask_id)
    except AskNotFound:
        raise Http404("No such ask.") from None
    pack = ask_selectors.ask_context(ask=ask)
    component = pack["component"]
    component_id = component.get("componentId") if component else None
    can_decide = role in DECIDING_ROLES and ask.status == Ask.Status.OPEN and not ask.is_overdue
    return {
        "ask": ask,
        "pack": pack,
        # Past its deadline only the deadline decides (ask_decide): the page says what it will do.
        "can_decide": can_decide,
        "quorum": approver_selectors.quorum_state(ask=ask),
        **_standing_offer(ask, pack["args"], can_decide, standing_form),
        "form": form or DecisionForm(plain=ask.kind == Ask.Kind.PLAIN),
        "detail_json": _pretty(ask.detail),
        "args_json": _pretty(pack["args"]),
        "original_args_json": _pretty(pack["original_args"]),
        "decision_json": _pretty(ask.decision()),
        # An id that is no string (the agent's to send) is an unknown component: the readable fallback.
        "component_template": COMPONENTS.get(component_id) if isinstance(component_id, str) else None,
        "component_json": _pretty(component),
        "evidence": (ask.check_in or {}).get("evidence") if ask.check_in else None,
        "deliveries": ask.deliveries.filter(kind=WebhookDelivery.Kind.DECISION).prefetch_related("attempt_log"),
        "approving_does": ask_selectors.APPROVING_DOES.get(ask.kind),
        "unresolved_report": ask_selectors.ask_unresolved_report(ask=ask),
    }


def _standing_offer(ask: Ask, args: Any, can_decide: bool, form: StandingGrantForm | None) -> dict[str, Any]:
    """The "approve this and the same calls" form, when the project's limits allow one for this ask."""
    if not can_decide or ask.kind not in approver_selectors.STANDING_KINDS or not isinstance(args, dict):
        return {}
    limits = approver_selectors.standing_limits_of(project=ask.project)
    if limits.max_minutes == 0:
        return {}
    initial = {"minutes": min(limits.max_minutes, 60), "pattern": _pretty(args), "agent": "same"}
    return {"standing_form": form or StandingGrantForm(initial=initial), "standing_limits": limits}


def ask_page_with_problem(
    request: HtmxHttpRequest, ask_id: int, *, standing_form: StandingGrantForm, problem: str
) -> HttpResponse:
    """The ask's page again with why a standing approval was refused (422), the form as sent."""
    context = {**_page_context(request, ask_id, standing_form=standing_form), "standing_problem": problem}
    return render(request, "asks/ask_detail.html", context, status=422)


@require_GET
@login_required
def ask_detail(request: HtmxHttpRequest, ask_id: int) -> HttpResponse:
    return render(request, "asks/ask_detail.html", _page_context(request, ask_id))


def ask_to_decide(request: HtmxHttpRequest, ask_id: int) -> Ask:
    """The ask for a POST that decides it: 404 for a person outside its project (as if it did not
    exist), 403 for one who may only read it. Every deciding page asks through here."""
    try:
        ask, role = ask_selectors.ask_get_for_user(user=request.user, ask_id=ask_id)
    except AskNotFound:
        raise Http404("No such ask.") from None
    if role not in DECIDING_ROLES:
        raise PermissionDenied("Only approvers of this project may decide its asks.")
    return ask


@require_POST
@login_required_returning_to("asks:ask-detail", "ask_id")
def ask_decide(request: HtmxHttpRequest, ask_id: int) -> HttpResponse:
    """Approve, decline or answer. `by` is the signed-in user; a second decision sees the first."""
    ask = ask_to_decide(request, ask_id)
    form = DecisionForm(request.POST, plain=ask.kind == Ask.Kind.PLAIN)
    status = 409 if ask.status != Ask.Status.OPEN else 200
    if status == 200 and not form.is_valid():
        status = 422
    elif (
        status == 200 and ask.kind == Ask.Kind.PLAIN and (not form.cleaned_data["confirmed"] or "edit" in request.POST)
    ):
        # An answer is confirmed before it is sent: the panel shows it back, with Send and Edit
        # (which brings the form back as it was filled).
        confirming = None if "edit" in request.POST else form.cleaned_data
        context = {**_page_context(request, ask_id, form=form), "confirming": confirming}
        template = "asks/ask_detail.html" + ("#decision-panel" if wants_partial(request) else "")
        return render(request, template, context)
    elif status == 200:
        user = signed_in_user(request)
        data = form.cleaned_data
        try:
            ask_services.ask_decide(
                ask_id=ask.pk,
                approved=data["decision"] != "decline",
                via=Ask.Via.PAGE,
                by_label=user.get_username(),
                user=user,
                note=data["note"] or None,
                value=data["value"] if data["decision"] == "answer" else ask_services.NO_VALUE,
            )
        except AskAlreadyDecided:
            status = 409  # someone else won, or the deadline had passed: the panel shows which, and when
        except (AskNotPermitted, AskOwnDecision) as exc:
            raise PermissionDenied(exc.message) from None
        except AskInvalid as exc:
            form.add_error(None, exc.message)
            status = 422
        if not wants_partial(request) and status == 200:
            return redirect("asks:ask-detail", ask_id=ask.pk)
    context = {**_page_context(request, ask_id, form=form if status == 422 else None), "lost": status == 409}
    if wants_partial(request):
        # htmx swaps only 2xx answers: the panel itself says who decided, or what to fix. The
        # badge rides along out of band, counting the ask no more once it is decided.
        return render(request, "asks/ask_detail.html#decision-response", context)
    return render(request, "asks/ask_detail.html", context, status=status)


@require_GET
@login_required
def inbox_badge(request: HtmxHttpRequest) -> HttpResponse:
    """The navigation's count of waiting asks, polled by every page while it is visible."""
    return render(request, "base.html#inbox-badge")
