"""`GET /api/v1/asks`: the project's asks for an integration that decides them (a chat bot with a
`decide` key finds what waits, shows it and decides it) or an agent; never a checkpoint, never
another project's ask."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.models import Ask
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, b_body, decide, open_ask, plain_body, refused

pytestmark = pytest.mark.django_db


def _ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [ask["id"] for ask in response.json()["asks"]]


def test_an_integration_lists_what_waits_reads_it_and_decides_it(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    ask = open_ask(agent_client)  # the b fixture's pause, with its checkpoint

    listed = integration_client.get(f"{ASKS}?status=open")
    assert _ids(listed) == [ask["id"]]
    shown = listed.json()["asks"][0]
    assert shown["question"] == ask["question"]
    assert "checkpoint" not in shown
    assert "checkpoint" not in integration_client.get(f"{ASKS}/{ask['id']}").json()["ask"]

    assert decide(integration_client, ask["id"], approved=True, by="chat-bot").status_code == 200
    assert _ids(integration_client.get(f"{ASKS}?status=open")) == []
    assert _ids(integration_client.get(f"{ASKS}?status=decided")) == [ask["id"]]


def test_asks_are_listed_newest_first_and_paged_by_cursor(agent_client: ApiClient) -> None:
    opened = [open_ask(agent_client, plain_body(f"q{i}", run_id=f"run-{i}"))["id"] for i in range(5)]

    first = agent_client.get(f"{ASKS}?limit=2")
    pages = [_ids(first)]
    cursor = first.json().get("nextCursor")
    while cursor:
        page = agent_client.get(f"{ASKS}?limit=2&cursor={cursor}")
        pages.append(_ids(page))
        cursor = page.json().get("nextCursor")

    assert pages == [opened[::-1][0:2], opened[::-1][2:4], opened[::-1][4:]]


def test_filters_by_run_session_and_kind(agent_client: ApiClient) -> None:
    b_ask = open_ask(agent_client)
    plain = open_ask(agent_client, {**plain_body("q9", run_id="run-plain"), "sessionId": "s-plain"})

    assert _ids(agent_client.get(f"{ASKS}?run=run-plain")) == [plain["id"]]
    assert _ids(agent_client.get(f"{ASKS}?session=s-plain")) == [plain["id"]]
    assert _ids(agent_client.get(f"{ASKS}?kind=plain")) == [plain["id"]]
    assert _ids(agent_client.get(f"{ASKS}?kind=ask")) == [b_ask["id"]]


def test_an_open_ask_past_its_deadline_is_not_listed_as_waiting(agent_client: ApiClient) -> None:
    """As the inbox: only the deadline pass decides an overdue ask, so nobody is asked to."""
    ask = open_ask(agent_client, plain_body())
    Ask.objects.filter(pk=ask["id"]).update(deadline=timezone.now() - timedelta(seconds=1))

    assert _ids(agent_client.get(f"{ASKS}?status=open")) == []
    assert _ids(agent_client.get(ASKS)) == [ask["id"]]


def test_another_projects_asks_are_never_listed(agent_client: ApiClient, other_agent_client: ApiClient) -> None:
    open_ask(agent_client)

    assert _ids(other_agent_client.get(ASKS)) == []
    assert _ids(other_agent_client.get(f"{ASKS}?run={b_body()['runId']}")) == []


def test_a_key_with_neither_scope_is_told_which_it_needs(ingest_only_client: ApiClient) -> None:
    body = refused(ingest_only_client.get(ASKS), 403, "ERR_SCOPE")
    assert "'asks' or 'decide'" in body["error"]


@pytest.mark.parametrize("query", ["status=waiting", "kind=nonsense", "limit=many"])
def test_a_bad_filter_is_a_422_naming_it(agent_client: ApiClient, query: str) -> None:
    body = refused(agent_client.get(f"{ASKS}?{query}"), 422, "ERR_INVALID_PARAMETERS")
    assert query.split("=")[0] in body["error"]
