"""The people's side of asks: the inbox, the ask page with its context pack, and the decision form."""

import copy
import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from ledger.asks.services import ask_open
from ledger.models import Ask
from tenancy.models import Membership, Project
from tests.conftest import ApiClient, load_fixture, numbered_per_run, person
from tests.ledger.ask_helpers import ASKS, b_body

pytestmark = pytest.mark.django_db

MAX_QUERIES = 12
SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
B_OUTCOME = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
B_CHECKPOINT = load_fixture("b-middleware/ask-checkpoint.json")
C_OUTCOME = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]
C_CHECKPOINT = load_fixture("c-checkin/checkin-checkpoint.json")
B_RUN = "run-1796043009968-3"
C_RUN = "run-1796043011151-1"
ASK_ROW = re.compile(r'<tr class="ask-row" id="ask-(\d+)">')
BADGE = re.compile(r'<span id="inbox-count" class="badge"[^>]*>\s*(\d*)\s*</span>')
OOB_BADGE = re.compile(r'<span id="inbox-count" class="badge" hx-swap-oob="true">\s*(\d+)\s*</span>')
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
DECIDE_FORM = re.compile(r'<form[^>]*action="/asks/\d+/decide/"')
OLDER_LINK = re.compile(r'<a href="\?cursor=([^"]+)">Less urgent asks</a>')


@pytest.fixture
def second_approver_client(django_user_model: Any, project: Project) -> Client:
    client = Client()
    client.force_login(person(django_user_model, "dora", project, Membership.Role.APPROVER))
    return client


def _open(project: Project, pause_data: dict[str, Any], run_id: str = "run-1", **kwargs: Any) -> Ask:
    arguments: dict[str, Any] = {
        "key": None,
        "session_id": None,
        "checkpoint": None,
        "deadline": None,
        "on_timeout": "decline",
        **kwargs,
    }
    ask, _ = ask_open(project=project, run_id=run_id, pause_data=pause_data, **arguments)
    return ask


def _plain(project: Project, tool_call_id: str = "q1", question: str = "Which region?", **data: Any) -> Ask:
    pause_data = {"toolCallId": tool_call_id, "toolName": "ask_user", "question": question, **data}
    return _open(project, pause_data, run_id="run-q")


def _events_until_resume(name: str) -> list[dict[str, Any]]:
    raw = load_fixture(name)
    return numbered_per_run(raw["events"])[: raw["resumeStartsAtSeq"]]


def _paused_b(agent_client: ApiClient, events: list[dict[str, Any]] | None = None) -> int:
    """Scenario b as an agent reports it: the events up to the pause, then the paused outcome."""
    response = agent_client.ingest(events or _events_until_resume("b-middleware/events-declined.json"))
    assert response.status_code == 200, response.content
    body = {**B_OUTCOME, "checkpoint": B_CHECKPOINT, "runId": B_RUN}
    response = agent_client.post_json("/api/v1/asks", body)
    assert response.status_code in (200, 201), response.content
    return response.json()["ask"]["id"]


def _paused_c(agent_client: ApiClient) -> int:
    response = agent_client.ingest(_events_until_resume("c-checkin/events-approved.json"))
    assert response.status_code == 200, response.content
    body = {**C_OUTCOME, "checkpoint": C_CHECKPOINT, "runId": C_RUN}
    response = agent_client.post_json("/api/v1/asks", body)
    assert response.status_code == 200, response.content  # the checkin.request opened it already
    return response.json()["ask"]["id"]


def _html(response: Any, status: int = 200) -> str:
    assert response.status_code == status, response.content[:500]
    return response.content.decode()


def _rows(page: str) -> list[int]:
    return [int(n) for n in ASK_ROW.findall(page)]


def _pre(page: str, element_id: str) -> Any:
    match = re.search(rf'<pre id="{element_id}">(.*?)</pre>', page, re.S)
    assert match, f"no <pre id={element_id}>"
    return json.loads(html.unescape(match.group(1)))


def _decide_url(ask_id: int) -> str:
    return f"/asks/{ask_id}/decide/"


# Who may see what


def test_pages_anonymous_redirect_to_login(client: Client, project: Project) -> None:
    ask = _plain(project)

    for response in (
        client.get("/inbox/"),
        client.get(f"/asks/{ask.pk}/"),
        client.post(_decide_url(ask.pk), {"decision": "answer", "value": "x"}),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_pages_outsider_sees_no_ask(outsider_client: Client, project: Project) -> None:
    ask = _plain(project)

    inbox = _html(outsider_client.get("/inbox/"))

    assert _rows(inbox) == []
    assert "Nothing is waiting for you." in inbox
    assert BADGE.search(inbox).group(1) == "0"
    assert outsider_client.get(f"/asks/{ask.pk}/").status_code == 404
    assert outsider_client.post(_decide_url(ask.pk), {"decision": "answer", "value": "x"}).status_code == 404
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_pages_auditor_reads_the_ask_but_cannot_decide(auditor_client: Client, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    page = _html(auditor_client.get(f"/asks/{ask.pk}/"))
    inbox = _html(auditor_client.get("/inbox/"))
    refused = auditor_client.post(_decide_url(ask.pk), {"decision": "approve"})

    assert escape("Approve a transfer of 2500 EUR to ACC-900?") in page
    assert not DECIDE_FORM.search(page)
    assert 'value="approve"' not in page
    assert "Only approvers of acme can decide it." in page
    assert _rows(inbox) == []  # auditors are not approvers
    assert BADGE.search(inbox).group(1) == "0"
    assert refused.status_code == 403
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_pages_project_admin_decides_like_an_approver(django_user_model: Any, project: Project) -> None:
    client = Client()
    client.force_login(person(django_user_model, "erin", project, Membership.Role.ADMIN))
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    assert _rows(_html(client.get("/inbox/"))) == [ask.pk]
    assert client.post(_decide_url(ask.pk), {"decision": "approve"}).status_code == 302
    ask.refresh_from_db()
    assert (ask.status, ask.decided_by_label) == (Ask.Status.DECIDED, "erin")


# The inbox


def test_inbox_lists_open_asks_most_urgent_first(
    approver_client: Client, project: Project, other_project: Project
) -> None:
    """The nearest deadline first, then the asks without one, oldest first."""
    first = _plain(project, "q1", "First question")
    second = _plain(project, "q2", "Second question")
    third = _plain(project, "q3", "Third question")
    decided = _plain(project, "q4", "Decided already")
    Ask.objects.filter(pk=decided.pk).update(status=Ask.Status.DECIDED, decided_at=decided.created_at, approved=True)
    _plain(other_project, "q5", "Not this project")
    Ask.objects.filter(pk=third.pk).update(deadline=timezone.now() + timedelta(minutes=5))
    Ask.objects.filter(pk=second.pk).update(deadline=timezone.now() + timedelta(hours=2))

    page = _html(approver_client.get("/inbox/"))

    assert _rows(page) == [third.pk, second.pk, first.pk]
    assert "in 4 min" in page or "in 5 min" in page
    assert "Decided already" not in page
    assert "Not this project" not in page
    assert "<html" in page
    assert BADGE.search(page).group(1) == "3"
    assert f'href="/asks/{first.pk}/"' in page
    assert 'href="/projects/acme/runs/run-q/"' in page


def test_inbox_htmx_returns_rows_and_the_out_of_band_badge(approver_client: Client, project: Project) -> None:
    asks = [_plain(project, f"q{n}", f"Question {n}") for n in range(2)]

    response = approver_client.get("/inbox/", HTTP_HX_REQUEST="true")
    partial = _html(response)

    assert "<html" not in partial
    assert "<table" not in partial
    assert "<thead" not in partial
    assert _rows(partial) == [asks[0].pk, asks[1].pk]
    assert OOB_BADGE.search(partial).group(1) == "2"
    assert "HX-Request" in response["Vary"]


def test_inbox_htmx_empty_still_updates_the_badge(approver_client: Client, project: Project) -> None:
    partial = _html(approver_client.get("/inbox/", HTTP_HX_REQUEST="true"))

    assert "Nothing is waiting for you." in partial
    assert OOB_BADGE.search(partial).group(1) == "0"


def test_inbox_badge_is_on_every_page(approver_client: Client, project: Project) -> None:
    ask = _plain(project)
    _plain(project, "q2")

    for path in ("/", "/inbox/", f"/asks/{ask.pk}/"):
        assert BADGE.search(_html(approver_client.get(path))).group(1) == "2", path


def test_inbox_pages_with_a_cursor_and_constant_queries(
    approver_client: Client, project: Project, django_assert_max_num_queries: Any
) -> None:
    asks = [_plain(project, f"q{n}", f"Question {n}") for n in range(30)]
    most_urgent_first = [a.pk for a in asks]  # none has a deadline: the oldest first

    with django_assert_max_num_queries(MAX_QUERIES):
        page = _html(approver_client.get("/inbox/"))
    with django_assert_max_num_queries(MAX_QUERIES):
        partial = _html(approver_client.get("/inbox/", HTTP_HX_REQUEST="true"))

    assert _rows(page) == most_urgent_first[:25]
    assert _rows(partial) == most_urgent_first[:25]
    cursor = OLDER_LINK.search(page).group(1)
    with django_assert_max_num_queries(MAX_QUERIES):
        older = _html(approver_client.get(f"/inbox/?cursor={cursor}"))
    assert _rows(older) == most_urgent_first[25:]
    assert not OLDER_LINK.search(older)
    assert 'hx-trigger="every 5s' in page
    assert 'hx-trigger="every 5s' not in older  # later pages stay put


# The ask page: the context pack


def test_ask_page_shows_the_check_in_evidence(approver_client: Client, agent_client: ApiClient) -> None:
    ask_id = _paused_c(agent_client)
    check_in = C_OUTCOME["checkIn"]
    evidence = check_in["evidence"]

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    assert "Check-in evidence" in page
    assert escape(evidence["willDo"]) in page
    assert escape(check_in["intent"]) in page
    for frame in evidence["read"]:
        assert escape(frame["summary"]) in page
    for driver in evidence["drivers"]:
        assert len(driver["text"]) <= 300
        assert escape(driver["text"]) in page
    assert "score 0.229" in page  # the top driver, 0.22857…
    assert escape(evidence["trail"]["summary"]) in page
    for call in evidence["trail"]["toolCalls"]:
        assert f"<code>{call['name']}</code>" in page
    assert _pre(page, "args") == check_in["args"]
    assert 'id="original-args"' not in page
    assert "<code>post_to_channel</code>" in page
    assert 'value="approve"' in page
    assert 'value="decline"' in page


def test_ask_page_shows_the_middleware_ask(approver_client: Client, agent_client: ApiClient) -> None:
    ask_id = _paused_b(agent_client)

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    assert escape("Approve a transfer of 2500 EUR to ACC-900?") in page
    assert "<code>four-eyes</code>" in page
    assert "<code>transfer_funds</code>" in page
    assert "(call t3)" in page
    assert "P-4EYES-1000" in page  # the detail
    assert _pre(page, "args") == B_CHECKPOINT["sharedState"]["pausedAskArgs"]
    # the fixture's t3 was not transformed: nothing to compare
    assert "as transformed by earlier middleware" not in page
    assert 'id="original-args"' not in page


def test_ask_page_shows_a_component_whose_id_is_no_string_as_an_unknown_one(
    approver_client: Client, agent_client: ApiClient
) -> None:
    """The agent's to send: a list as `componentId` gets the readable fallback, not a 500 that
    would keep everyone from opening, and so deciding, the ask."""
    body = b_body()
    body["pauseData"]["ask"]["component"] = {"componentId": ["payee-picker"], "props": {"n": 1}}
    ask_id = agent_client.post_json(ASKS, body).json()["ask"]["id"]

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    assert escape('"payee-picker"') in page


def test_ask_page_previews_the_artifact_its_component_references(
    approver_client: Client, agent_client: ApiClient, project: Project
) -> None:
    """Issue #4: what the person decides on (a stale choice is refused by the framework, §2.4),
    not only its ref and size; escaped, and cut at 4 KiB with a pointer to the artifact's page."""
    from artifacts.scopes import Scope
    from artifacts.services import PutInput, artifact_put, store_for_project

    text = "payee ACC-900 <b>rows</b> " + "x" * 5000
    spec = PutInput(kind="dataset/rows", media_type="text/plain", payload={"shape": "text", "value": text})
    meta, _ = artifact_put(store=store_for_project(project=project), scope=Scope("t1", "p1", "c1"), spec=spec)
    body = b_body()
    body["pauseData"]["ask"]["component"] = {"componentId": "payee-picker", "propsRef": meta["ref"]}
    ask_id = agent_client.post_json(ASKS, body).json()["ask"]["id"]

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    assert escape("payee ACC-900 <b>rows</b>") in page
    assert "x" * 5000 not in page
    assert "The first 4096 bytes shown" in page


def test_ask_page_shows_transformed_and_original_args_when_they_differ(
    approver_client: Client, agent_client: ApiClient
) -> None:
    # As in the fixture's t1: the model sent "euro", normalize-currency passed "EUR" on to four-eyes.
    events = copy.deepcopy(_events_until_resume("b-middleware/events-declined.json"))
    (t3_start,) = [e for e in events if e["type"].endswith("stream.tool_start") and e["payload"]["toolCallId"] == "t3"]
    t3_start["payload"]["args"]["currency"] = "euro"
    ask_id = _paused_b(agent_client, events)

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    assert "as transformed by earlier middleware" in page
    assert _pre(page, "args") == {"from": "ACC-100", "to": "ACC-900", "amount": 2500, "currency": "EUR"}
    assert _pre(page, "original-args") == {"from": "ACC-100", "to": "ACC-900", "amount": 2500, "currency": "euro"}


def test_ask_page_shows_the_runs_last_words_and_earlier_calls_with_results(
    approver_client: Client, agent_client: ApiClient, project: Project
) -> None:
    earlier = _open(project, {**B_OUTCOME["pauseData"], "toolCallId": "t0"}, run_id="run-earlier")
    approver_client.post(_decide_url(earlier.pk), {"decision": "decline", "note": "no PO on file"})
    ask_id = _paused_b(agent_client)

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    # what the model said just before it chose t3, and the two calls before t3 with their results
    last_words = re.search(r'<div class="card last-model-message">(.*?)</div>', page, re.S)
    assert last_words
    assert "Now the large supplier payment." in last_words.group(1)
    calls = re.findall(r'<li class="prior-call( failed)?">(.*?)</li>', page, re.S)
    assert len(calls) == 2
    assert "transfer_funds" in calls[0][1]
    assert "ACC-200" in calls[0][1]
    assert "transferred 40 EUR from ACC-100 to ACC-200 (ref TX-40)" in calls[0][1]
    assert "account FROZEN-777 is frozen by compliance hold CH-19" in calls[1][1]
    # the context is what happened, not a list of event type names
    assert "agent.route_decided" not in page
    assert "stream.tool_start" not in page
    assert "declined by bob: “no PO on file”" in page


def test_ask_page_says_what_approving_and_declining_do(approver_client: Client, agent_client: ApiClient) -> None:
    ask_id = _paused_b(agent_client)

    page = _html(approver_client.get(f"/asks/{ask_id}/"))

    approve = re.search(r'<p class="approving-does">(.*?)</p>', page, re.S)
    assert approve
    assert "Approving runs transfer_funds (call t3) with the arguments below" in approve.group(1)
    assert _pre(page, "args") == {"from": "ACC-100", "to": "ACC-900", "amount": 2500, "currency": "EUR"}
    decline = re.search(r'<p class="declining-does">(.*?)</p>', page, re.S)
    assert decline
    assert "transfer_funds does not run" in decline.group(1)
    assert "declined by human: &lt;your note&gt;" in decline.group(1)


def test_ask_page_of_a_plain_question_says_the_answer_is_the_result(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    page = _html(approver_client.get(f"/asks/{ask.pk}/"))

    assert "Your answer becomes the result of ask_user (call q1)" in page
    assert "Nothing yet: no model answer of this run was received before the ask." in page


# Deciding on the page


def test_decide_approve_records_the_signed_in_user(approver_client: Client, approver: Any, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    response = approver_client.post(
        _decide_url(ask.pk),
        {"decision": "approve", "note": "SC-88 verified", "by": "mallory", "decided_by_label": "mallory"},
    )

    assert response.status_code == 302
    assert response["Location"] == f"/asks/{ask.pk}/"
    ask.refresh_from_db()
    assert ask.status == Ask.Status.DECIDED
    assert ask.approved is True
    assert ask.decided_by_label == "bob"
    assert ask.decided_by == approver
    assert ask.decided_via == Ask.Via.PAGE
    assert ask.note == "SC-88 verified"
    assert ask.decision()["by"] == "bob"
    page = _html(approver_client.get(f"/asks/{ask.pk}/"))
    assert "mallory" not in page
    assert not DECIDE_FORM.search(page)
    assert "<strong>bob</strong>" in page


def test_decide_decline_with_htmx_returns_the_panel(approver_client: Client, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    partial = _html(
        approver_client.post(
            _decide_url(ask.pk), {"decision": "decline", "note": "no PO on file", "by": "x"}, HTTP_HX_REQUEST="true"
        )
    )

    assert "<html" not in partial
    assert 'id="decision-panel"' in partial
    assert "Declined" in partial
    assert "<strong>bob</strong>" in partial
    assert "Someone else decided first" not in partial
    ask.refresh_from_db()
    assert (ask.approved, ask.decided_by_label, ask.note) == (False, "bob", "no PO on file")


def test_decide_second_decision_sees_the_first(
    approver_client: Client, second_approver_client: Client, project: Project
) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)
    assert approver_client.post(_decide_url(ask.pk), {"decision": "approve"}).status_code == 302

    partial = _html(second_approver_client.post(_decide_url(ask.pk), {"decision": "decline"}, HTTP_HX_REQUEST="true"))
    plain = _html(second_approver_client.post(_decide_url(ask.pk), {"decision": "decline"}), status=409)

    for page in (partial, plain):
        assert "Someone else decided first" in page
        assert "<strong>bob</strong>" in page
        assert "Approved" in page
    assert "<html" not in partial
    ask.refresh_from_db()
    assert (ask.approved, ask.decided_by_label) == (True, "bob")


def test_decide_without_csrf_token_is_403(approver: Any, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)

    refused = client.post(_decide_url(ask.pk), {"decision": "approve"})

    assert refused.status_code == 403
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN
    # with the page's token (the form field, or the header htmx sends) it goes through
    token = CSRF_FIELD.search(_html(client.get(f"/asks/{ask.pk}/"))).group(1)
    accepted = client.post(_decide_url(ask.pk), {"decision": "approve"}, HTTP_X_CSRFTOKEN=token, HTTP_HX_REQUEST="true")
    assert accepted.status_code == 200
    ask.refresh_from_db()
    assert (ask.status, ask.decided_by_label) == (Ask.Status.DECIDED, "bob")


def test_decide_rejects_an_unknown_decision(approver_client: Client, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    _html(approver_client.post(_decide_url(ask.pk), {"decision": "maybe"}), status=422)

    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_decide_consent_ask_refuses_an_answer(approver_client: Client, project: Project) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)

    page = _html(approver_client.post(_decide_url(ask.pk), {"decision": "answer", "value": "yes"}), status=422)

    assert "This ask is approved or declined." in page
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


# Plain asks take an answer


def test_plain_ask_page_offers_an_answer_not_approve(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    page = _html(approver_client.get(f"/asks/{ask.pk}/"))

    assert 'name="value"' in page
    assert 'name="value_is_json"' in page
    assert 'value="answer"' in page
    assert 'value="approve"' not in page
    assert 'value="decline"' not in page


def test_plain_ask_text_answer(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    response = approver_client.post(
        _decide_url(ask.pk), {"decision": "answer", "value": "eu-west-1", "note": "cheap", "confirmed": "on"}
    )

    assert response.status_code == 302
    ask.refresh_from_db()
    assert ask.value == "eu-west-1"
    assert ask.decision() == {"approved": True, "by": "bob", "at": ask.at_ms, "note": "cheap", "answer": "eu-west-1"}


def test_plain_ask_json_answer(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    response = approver_client.post(
        _decide_url(ask.pk),
        {
            "decision": "answer",
            "value": '{"region": "eu-west-1", "replicas": 3}',
            "value_is_json": "on",
            "confirmed": "on",
        },
    )

    assert response.status_code == 302
    ask.refresh_from_db()
    assert ask.value == {"region": "eu-west-1", "replicas": 3}
    assert ask.decision()["answer"] == {"region": "eu-west-1", "replicas": 3}


def test_plain_ask_json_null_answer_is_an_answer(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    response = approver_client.post(
        _decide_url(ask.pk), {"decision": "answer", "value": "null", "value_is_json": "on", "confirmed": "on"}
    )

    assert response.status_code == 302
    ask.refresh_from_db()
    assert ask.decision()["answer"] is None


def test_plain_ask_invalid_json_answer_is_refused(approver_client: Client, project: Project) -> None:
    ask = _plain(project)

    page = _html(
        approver_client.post(_decide_url(ask.pk), {"decision": "answer", "value": "{nope", "value_is_json": "on"}),
        status=422,
    )

    assert "This is not valid JSON." in page
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


@pytest.mark.parametrize("decision", ["approve", "decline"])
def test_plain_ask_refuses_approve_and_decline(approver_client: Client, project: Project, decision: str) -> None:
    ask = _plain(project)

    page = _html(approver_client.post(_decide_url(ask.pk), {"decision": decision}), status=422)

    assert "This question takes an answer, not approve or decline." in page
    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


# Escaping


def test_pages_escape_what_the_agent_sent(approver_client: Client, project: Project) -> None:
    ask = _plain(project, question=SCRIPT, hint=SCRIPT)

    for page in (
        _html(approver_client.get(f"/asks/{ask.pk}/")),
        _html(approver_client.get("/inbox/")),
        _html(approver_client.get("/inbox/", HTTP_HX_REQUEST="true")),
    ):
        assert SCRIPT not in page
        assert ESCAPED_SCRIPT in page


def test_decide_submitted_twice_by_one_person_says_they_had_already_decided(
    approver_client: Client, project: Project
) -> None:
    ask = _open(project, B_OUTCOME["pauseData"], run_id=B_RUN)
    assert approver_client.post(_decide_url(ask.pk), {"decision": "approve"}).status_code == 302

    again = _html(approver_client.post(_decide_url(ask.pk), {"decision": "approve"}, HTTP_HX_REQUEST="true"))

    assert "You had already decided this." in again
    assert "Someone else decided first" not in again


def _put_text_artifact(project: Project, text: str) -> str:
    from artifacts.scopes import Scope
    from artifacts.services import PutInput, artifact_put, store_for_project

    spec = PutInput(kind="dataset/rows", media_type="text/plain", payload={"shape": "text", "value": text})
    meta, _ = artifact_put(store=store_for_project(project=project), scope=Scope("t1", "p1", "c1"), spec=spec)
    return str(meta["ref"])


def _referenced_section(page: str) -> str:
    start = page.index('<ul class="referenced-artifacts">')
    return page[start : page.index("</ul>", start)]


def test_ask_page_still_lists_every_artifact_its_component_references(
    approver_client: Client, agent_client: ApiClient, project: Project
) -> None:
    """Previews stop at five; the list does not, so the person deciding sees every one involved."""
    refs = [_put_text_artifact(project, f"rows of batch {n}") for n in range(6)]
    body = b_body()
    body["pauseData"]["ask"]["component"] = {"componentId": "payee-picker", "props": {"refs": refs}}
    ask_id = agent_client.post_json(ASKS, body).json()["ask"]["id"]

    page = approver_client.get(f"/asks/{ask_id}/").content.decode()

    listed = set(re.findall(r'href="/projects/acme/artifacts/(art_[A-Za-z0-9]{22})/"', _referenced_section(page)))
    assert listed == set(refs)


def test_ask_page_lists_an_artifact_its_args_and_component_both_reference_once(
    approver_client: Client, agent_client: ApiClient, project: Project
) -> None:
    """Once, not twice (read, hashed and previewed twice, taking two of the five places)."""
    ref = _put_text_artifact(project, "payee ACC-900")
    body = b_body()
    body["checkpoint"]["sharedState"]["pausedAskArgs"]["memo"] = ref
    body["pauseData"]["ask"]["component"] = {"componentId": "payee-picker", "propsRef": ref}
    ask_id = agent_client.post_json(ASKS, body).json()["ask"]["id"]

    page = approver_client.get(f"/asks/{ask_id}/").content.decode()

    assert _referenced_section(page).count(f'href="/projects/acme/artifacts/{ref}/"') == 1
