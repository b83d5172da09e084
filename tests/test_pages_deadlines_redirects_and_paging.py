"""The human pages around deadlines, signing in again, and long lists.

- An open ask past its deadline is shown as decided by its deadline (its onTimeout), with no form,
  and the inbox neither lists nor counts it; a late decision says the deadline decided, and a plain
  question the deadline closed reads as unanswered.
- An htmx decision carries the inbox badge out of band.
- A signed-out htmx request is told to load the login page (HX-Redirect), back to the page shown;
  a signed-out POST to a POST-only URL signs in back to the object's page.
- An artifact's origin.runId follows the run-id rule at put, and the artifact pages link only run
  ids that name a run page.
- Stored audit bundles are keyset-paged.
"""

import hashlib
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.db.models.functions import Now
from django.test import Client
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.scopes import scope_header
from ledger.asks.services import ask_open, asks_apply_deadlines
from ledger.models import Ask, AuditBundle
from tenancy.models import Project
from tests.conftest import ApiClient, load_fixture, person

pytestmark = pytest.mark.django_db

B_OUTCOME = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
B_RUN = "run-1796043009968-3"
DECIDE_FORM = re.compile(r'<form[^>]*action="/asks/\d+/decide/"')
BADGE = re.compile(r'<span id="inbox-count" class="badge"[^>]*>\s*(\d*)\s*</span>')
SCOPE = {"AF-Scope": scope_header({"tenant": "t", "principal": "p", "conversationId": "c1"})}


def _open(project: Project, pause_data: dict[str, Any] | None = None, run_id: str = B_RUN, **kwargs: Any) -> Ask:
    arguments: dict[str, Any] = {
        "key": None,
        "session_id": None,
        "checkpoint": None,
        "deadline": None,
        "on_timeout": "decline",
        **kwargs,
    }
    ask, _ = ask_open(project=project, run_id=run_id, pause_data=pause_data or B_OUTCOME["pauseData"], **arguments)
    return ask


def _past_deadline(ask: Ask) -> Ask:
    """The deadline passed five minutes ago by PostgreSQL's clock; beat has not run yet."""
    Ask.objects.filter(pk=ask.pk).update(deadline=Now() - timedelta(minutes=5))
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN
    return ask


def _panel(page: str) -> str:
    match = re.search(r'<section id="decision-panel".*?</section>', page, re.S)
    assert match, "no decision panel"
    return match.group(0)


def _next(location: str) -> str:
    return parse_qs(urlparse(location).query)["next"][0]


def _put(agent_client: ApiClient, origin: dict[str, Any]) -> Any:
    document = {"kind": "note", "mediaType": "text/plain", "origin": origin, "payload": {"shape": "text", "value": "x"}}
    return agent_client.post("/api/v1/artifacts", document, content_type="application/json", headers=SCOPE)


# --- asks: the deadline ------------------------------------------------------------------------


def test_ask_page_past_its_deadline_shows_the_deadline_decision_not_a_form(
    approver_client: Client, project: Project
) -> None:
    """Past its deadline only the deadline decides an ask (README, Asks). Before beat closes it, its
    page shows what the deadline decides (declined, its onTimeout) and offers no Approve/Decline
    form, and reading the page decides nothing."""
    ask = _past_deadline(_open(project, deadline=timezone.now() + timedelta(hours=1)))

    panel = _panel(approver_client.get(f"/asks/{ask.pk}/").content.decode())

    assert not DECIDE_FORM.search(panel)
    assert "The deadline passed <time" in panel
    assert "Declined as its onTimeout says" in panel
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN  # a GET writes nothing: the deadline pass closes it


def test_ask_page_past_its_deadline_shows_an_approving_on_timeout(approver_client: Client, project: Project) -> None:
    """An overdue ask whose onTimeout is approve is shown as approved by its deadline."""
    ask = _past_deadline(_open(project, deadline=timezone.now() + timedelta(hours=1), on_timeout="approve"))

    panel = _panel(approver_client.get(f"/asks/{ask.pk}/").content.decode())

    assert not DECIDE_FORM.search(panel)
    assert "Approved as its onTimeout says" in panel


def test_inbox_and_badge_leave_out_an_ask_past_its_deadline(approver_client: Client, project: Project) -> None:
    """The inbox lists, and the badge counts, the asks waiting for a person. An ask whose deadline
    has passed waits for nobody (only the deadline decides it), so it is neither listed nor counted;
    one whose deadline is still ahead is both."""
    overdue = _past_deadline(_open(project, deadline=timezone.now() + timedelta(hours=1)))
    waiting = _open(
        project, {**B_OUTCOME["pauseData"], "toolCallId": "later"}, deadline=timezone.now() + timedelta(hours=1)
    )

    page = approver_client.get("/inbox/").content.decode()

    assert f'id="ask-{overdue.pk}"' not in page
    assert f'id="ask-{waiting.pk}"' in page
    assert BADGE.search(page).group(1) == "1"


def test_late_page_decision_says_the_deadline_decided_not_someone_else(
    approver_client: Client, project: Project
) -> None:
    """A late decision on the page is answered 409 and records the deadline's decision (README). The
    panel says it came too late and that the deadline decided, never "Someone else decided first"."""
    ask = _past_deadline(_open(project, deadline=timezone.now() + timedelta(hours=1)))

    response = approver_client.post(f"/asks/{ask.pk}/decide/", {"decision": "approve"})

    assert response.status_code == 409
    panel = _panel(response.content.decode())
    assert "Someone else decided first" not in panel
    assert "Too late: the deadline had passed" in panel.split("Declined")[0]  # the lead names the deadline
    ask.refresh_from_db()
    assert (ask.decided_via, ask.approved) == (Ask.Via.DEADLINE, False)


def test_plain_question_closed_by_its_deadline_is_not_shown_as_answered(
    approver_client: Client, project: Project
) -> None:
    """An askHuman question nobody answered before its deadline is closed by the deadline with no
    answer (`answer: null`): the page says it was not answered before the deadline."""
    pause = {"toolCallId": "q1", "toolName": "ask_user", "question": "Which region?"}
    ask = _open(project, pause, run_id="run-q", deadline=timezone.now() + timedelta(hours=1))
    _past_deadline(ask)
    assert asks_apply_deadlines() == 1

    panel = _panel(approver_client.get(f"/asks/{ask.pk}/").content.decode())

    assert "Answered" not in panel
    assert "Not answered before the deadline" in panel


# --- asks: htmx and signing in -----------------------------------------------------------------


def test_htmx_decision_updates_the_inbox_badge_out_of_band(approver_client: Client, project: Project) -> None:
    """The badge is on every page, the ask page included. An htmx decision swaps the decision panel
    and carries the new count as an `hx-swap-oob` #inbox-count element (HOUSE_STYLE §3.7), as the
    inbox partial does."""
    ask = _open(project)
    other = _open(project, {**B_OUTCOME["pauseData"], "toolCallId": "another-call"})
    assert other.pk != ask.pk

    partial = approver_client.post(f"/asks/{ask.pk}/decide/", {"decision": "approve"}, HTTP_HX_REQUEST="true")

    assert partial.status_code == 200
    content = partial.content.decode()
    assert "<html" not in content
    assert "Approved" in _panel(content)
    oob = re.search(r'<span id="inbox-count"[^>]*hx-swap-oob="true"[^>]*>\s*(\d+)\s*</span>', content)
    assert oob, "no out-of-band badge in the decision response"
    assert oob.group(1) == "1"


def test_signed_out_htmx_poll_is_told_to_redirect_not_given_the_login_page(client: Client, project: Project) -> None:
    """A signed-out htmx request (the inbox poll once the session ended) gets `HX-Redirect` to the
    login page, with `next` the page the browser shows (HX-Current-URL), instead of a 302 whose
    login page htmx would swap into the inbox's <tbody>."""
    response = client.get("/inbox/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/inbox/?cursor=Mg")

    assert response.status_code == 200
    assert "Location" not in response.headers
    assert urlparse(response["HX-Redirect"]).path == "/accounts/login/"
    assert _next(response["HX-Redirect"]) == "/inbox/?cursor=Mg"
    assert b"<html" not in response.content


def test_signed_out_htmx_request_without_its_page_keeps_the_asked_url_as_next(client: Client, project: Project) -> None:
    """Without HX-Current-URL (or with one naming another origin) `next` stays the URL asked for."""
    for headers in ({}, {"HTTP_HX_CURRENT_URL": "https://elsewhere.example/steal/"}):
        response = client.get("/inbox/", HTTP_HX_REQUEST="true", **headers)

        assert _next(response["HX-Redirect"]) == "/inbox/"


def test_signed_out_plain_request_is_still_redirected(client: Client, project: Project) -> None:
    """Without JavaScript nothing changes: a 302 to the login page, `next` the page asked for."""
    response = client.get("/inbox/")

    assert response.status_code == 302
    assert "HX-Redirect" not in response.headers
    assert _next(response["Location"]) == "/inbox/"


def test_signed_out_decision_sends_back_to_the_ask_page_after_sign_in(
    client: Client, project: Project, approver: Any
) -> None:
    """A signed-out approver who clicks Approve is sent to sign in with `next` the ask page (a GET
    that shows the decision form), not the POST-only decide URL a browser GET would answer 405;
    nothing is decided."""
    ask = _open(project)

    response = client.post(f"/asks/{ask.pk}/decide/", {"decision": "approve"})

    assert response.status_code == 302
    assert _next(response["Location"]) == f"/asks/{ask.pk}/"
    signed_in = Client()
    signed_in.force_login(approver)
    assert signed_in.get(_next(response["Location"])).status_code == 200
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_signed_out_hold_and_release_send_back_to_the_artifact_page(client: Client, project: Project) -> None:
    """Holding and releasing are POST-only too: signing in leads back to the artifact's page."""
    base = f"/projects/{project.slug}/artifacts/art_0123456789abcdefghijkl/"

    for url in (base + "hold/", base + "holds/7/release/"):
        response = client.post(url, {"reason": "evidence"})

        assert response.status_code == 302
        assert _next(response["Location"]) == base


# --- artifacts ---------------------------------------------------------------------------------


def test_artifact_put_refuses_an_origin_run_id_that_is_not_a_run_id(agent_client: ApiClient) -> None:
    """`origin.runId` follows ingestion's run-id rule (RUN_ID_RULE): the pages link it to the run's
    page, whose URL cannot hold '/'. A put breaking it is refused with 422 naming the rule."""
    for run_id in ("a/b", "", 7):
        put = _put(agent_client, {"runId": run_id, "toolCallId": "c1"})

        assert put.status_code == 422, put.content
        assert put.json()["code"] == "ERR_INVALID_ARTIFACT"
        assert "origin.runId must be a non-empty string" in put.json()["error"]
        assert "'/'" in put.json()["error"]
    assert not Artifact.objects.exists()  # a refused put writes nothing
    assert _put(agent_client, {"toolCallId": "c1"}).status_code == 201  # runId stays optional


def test_artifact_pages_link_a_run_id_only_when_it_names_a_run_page(
    agent_client: ApiClient, auditor_client: Client, project: Project
) -> None:
    """An artifact stored before puts checked origin.runId may hold one with '/': the artifact list
    and detail page show it unlinked (never a NoReverseMatch 500); a valid one is linked."""
    legacy = _put(agent_client, {"runId": "run-ok", "toolCallId": "c1"}).json()["meta"]["ref"]
    valid = _put(agent_client, {"runId": "run-ok", "toolCallId": "c2"}).json()["meta"]["ref"]
    Artifact.objects.filter(ref=legacy).update(origin={"runId": "a/b", "toolCallId": "c1"}, origin_run_id="a/b")
    run_link = f'href="/projects/{project.slug}/runs/run-ok/"'

    listing = auditor_client.get(f"/projects/{project.slug}/artifacts/")
    legacy_page = auditor_client.get(f"/projects/{project.slug}/artifacts/{legacy}/")
    valid_page = auditor_client.get(f"/projects/{project.slug}/artifacts/{valid}/")

    assert (listing.status_code, legacy_page.status_code, valid_page.status_code) == (200, 200, 200)
    assert "a/b" in listing.content.decode()
    assert listing.content.decode().count(run_link) == 1
    assert "run a/b" in legacy_page.content.decode()
    assert "/runs/a" not in legacy_page.content.decode()
    assert run_link in valid_page.content.decode()


def test_hold_reason_input_has_a_label(auditor_client: Client, agent_client: ApiClient, project: Project) -> None:
    """The hold form's reason input is named by a <label>, not only by its placeholder."""
    ref = _put(agent_client, {"toolCallId": "c1"}).json()["meta"]["ref"]

    page = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/").content.decode()

    field_id = re.search(r'<input[^>]*name="reason"[^>]*id="([^"]+)"', page).group(1)
    assert f'<label for="{field_id}">Reason</label>' in page


# --- audit bundles -----------------------------------------------------------------------------


def test_stored_bundles_beyond_the_first_hundred_can_be_reached(
    client: Client, django_user_model: Any, project: Project
) -> None:
    """The bundle list shows the newest 100 stored bundles and an "Older bundles" link, keyset-paged
    like the other lists (inbox, refusals, artifacts), so every stored bundle can be reached; with
    htmx the link fetches only the next rows."""
    client.force_login(person(django_user_model, "ada", project, "admin"))
    AuditBundle.objects.bulk_create(
        [
            AuditBundle(
                project=project, body=b"{}", sha256=hashlib.sha256(str(i).encode()).digest(), verdict={"valid": True}
            )
            for i in range(101)
        ]
    )
    oldest = AuditBundle.objects.order_by("id").first()

    page = client.get("/audit-bundles/").content.decode()
    older = re.search(r'href="(\?[^"]*cursor=[^"]+)"', page)

    assert older, "no link to older bundles"
    assert page.count('class="bundle-row"') == 100
    assert f'href="/audit-bundles/{oldest.pk}/"' not in page
    older_url = "/audit-bundles/" + older.group(1).replace("&amp;", "&")
    older_page = client.get(older_url).content.decode()
    assert f'href="/audit-bundles/{oldest.pk}/"' in older_page
    assert "Older bundles" not in older_page
    rows = client.get(older_url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in rows
    assert rows.count('class="bundle-row"') == 1


def test_the_server_wide_sweep_figures_are_shown_to_superusers_only(
    auditor_client: Client, project: Project, django_user_model: Any
) -> None:
    """A sweep covers every project's store: a project's members must not read other tenants'
    activity in its counts; the operators (superusers) see them."""
    from datetime import UTC, datetime

    from artifacts.models import SweepRun

    now = datetime.now(UTC)
    SweepRun.objects.create(started_at=now, finished_at=now, metadata_rows=987654, payload_bytes=1)
    page = f"/projects/{project.slug}/artifacts/"

    assert "987654" not in auditor_client.get(page).content.decode()
    operator = Client()
    operator.force_login(django_user_model.objects.create_superuser("ops", "ops@example.com", "pw-ops"))
    assert "987654" in operator.get(page).content.decode()
