"""What a decision may carry for each ask kind, and which keys may decide."""

import pytest

from ledger.models import Ask, RunEvent
from tenancy.models import AgentKey, Project
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import b_body, decide, open_ask, plain_body, sibling

pytestmark = pytest.mark.django_db

DECISION_EVENT = "ledger.human_decision"
ASKED_REF = "art_" + "A" * 22
OTHER_REF = "art_" + "B" * 22


# --- what a decision may carry, per ask kind --------------------------------------------------


def test_a_plain_ask_decided_over_the_api_without_an_answer_is_refused(
    integration_client: ApiClient, agent_client: ApiClient
) -> None:
    """A plain askHuman pause is answered with a value that becomes the tool's result (spec §2.1,
    §9.2 `{answer}`); a resume without one is ERR_PAUSE_ANSWER_REQUIRED (§2.4). `{by}` alone must not
    close the ask with `answer: null`, which is all the waiting agent would ever get."""
    ask_id = open_ask(agent_client, plain_body())["id"]

    response = decide(integration_client, ask_id, by="bot")

    assert response.status_code == 422, (response.status_code, response.content)
    assert "value" in response.json()["error"]
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()


def test_a_decision_whose_value_names_another_artifact_than_the_asks_props_ref_is_refused(
    integration_client: ApiClient, agent_client: ApiClient
) -> None:
    """An ask that pinned `component.propsRef` is resumed with ERR_STALE_DECISION when the
    answer's `value.from` names a different artifact (spec §2.4 step 2). Accepting such a decision
    closes the ask for good (one decision per ask) with an answer the agent cannot resume with."""
    body = b_body()
    body["pauseData"]["ask"]["component"] = {"componentId": "payee-picker", "propsRef": ASKED_REF}
    ask_id = open_ask(agent_client, body)["id"]
    stale = {"kind": "payee", "value": "ACC-900", "from": OTHER_REF}

    response = decide(integration_client, ask_id, approved=True, by="bot", value=stale)

    assert response.status_code in (409, 422), (response.status_code, response.content)
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()
    # the same choice made against the artifact the ask showed is a decision
    fresh = {**stale, "from": ASKED_REF}
    assert decide(integration_client, ask_id, approved=True, by="bot", value=fresh).status_code == 200


def test_a_plain_answer_is_limited_by_its_characters_not_its_utf8_bytes(
    integration_client: ApiClient, agent_client: ApiClient
) -> None:
    """ "A value is at most 100,000 characters of JSON" (README; the page's answer box holds as
    many characters): 60,000 accented letters are 60,002 characters of JSON, well within it."""
    ask_id = open_ask(agent_client, plain_body())["id"]
    answer = "é" * 60_000

    response = decide(integration_client, ask_id, by="bot", value=answer)

    assert response.status_code == 200, (response.status_code, response.content[:300])
    assert response.json()["decision"]["answer"] == answer


# --- which keys may decide --------------------------------------------------------------------


def test_the_key_whose_pause_request_events_report_an_ask_cannot_decide_it_whoever_posted_first(
    project: Project, agent_client: ApiClient
) -> None:
    """README: the key that opened an ask "by POST /asks or with the pause.request events it
    posted" may not decide it. An agent whose observer key posts the pause.request events (a batch,
    flushed a moment later) and whose asks key calls openAsk at once: which request arrives first
    must not decide whether the run's own key can approve its tool call."""
    ingest_and_decide = sibling(project, [AgentKey.Scope.INGEST, AgentKey.Scope.DECIDE])
    ask_id = open_ask(agent_client, plain_body(tool_call_id="call-9", run_id="run-ev"))["id"]
    pause = {"reason": "ask", "questionPayload": {"toolCallId": "call-9", "toolName": "ask_user", "question": "OK?"}}
    event = {"seq": 0, "type": "agentfootprint.pause.request", "payload": pause, "meta": {"runId": "run-ev"}}
    assert ingest_and_decide.ingest([event]).status_code == 200
    assert Ask.objects.filter(run_id="run-ev", tool_call_id="call-9").count() == 1

    response = decide(ingest_and_decide, ask_id, approved=True, by="me", value="yes")

    assert response.status_code == 403, (response.status_code, response.content)
    assert response.json()["code"] == "ERR_OWN_ASK"
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
