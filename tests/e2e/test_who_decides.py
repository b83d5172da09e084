"""Who decides, in a real browser: a quorum of two approvers in two browser contexts reaches the
waiting agent only with the second approval; a standing approval granted on an ask's page decides
the next ask at once, and once revoked decides nothing more."""

import threading
from typing import Any

import pytest
from playwright.sync_api import expect

from ledger.asks.approvers import approval_rule_create, standing_limits_set
from tenancy.models import Project
from tenancy.services import agent_key_create
from tests.e2e.test_inbox import _api, _sign_in
from tests.ledger.approver_helpers import people, treasury

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
ACCOUNT = "ACC-900"


def _open(base: str, secret: str, tool_call_id: str, amount: int) -> int:
    status, body = _api(
        base,
        secret,
        "POST",
        "/api/v1/asks",
        {
            "runId": f"run-e2e-{tool_call_id}",
            "pauseData": {
                "toolCallId": tool_call_id,
                "toolName": "transfer_funds",
                "ask": {"question": f"Transfer {amount} EUR to {ACCOUNT}?", "middleware": "four-eyes"},
            },
            "checkpoint": {"sharedState": {"pausedAskArgs": {"amount": amount, "to": ACCOUNT}}},
        },
    )
    assert status == 201, body
    return int(body["ask"]["id"])


class _Waiter(threading.Thread):
    """The paused agent's long-poll."""

    def __init__(self, base: str, secret: str, ask_id: int) -> None:
        super().__init__(daemon=True)
        self.args, self.answer = (base, secret, ask_id), None

    def run(self) -> None:
        base, secret, ask_id = self.args
        self.answer = _api(base, secret, "GET", f"/api/v1/asks/{ask_id}/decision?wait=30", timeout=40)


def test_a_quorum_of_two_in_two_browsers(live_server: Any, new_page: Any, project: Project, django_user_model: Any):
    ann, ben = people(django_user_model, project, "ann", "ben")
    treasury(project, ann, ben)
    secret = agent_key_create(project=project, scopes=["asks"])[1]
    _open(live_server.url, secret, "seen", 1)  # the project's runs call the tool a rule names
    approval_rule_create(project=project, tool_name="transfer_funds", group_name="treasury", quorum=2, conditions="")
    ask_id = _open(live_server.url, secret, "big", 5000)
    waiter = _Waiter(live_server.url, secret, ask_id)
    waiter.start()

    first, second = new_page(), new_page()
    _sign_in(first, live_server.url, "ann", f"/asks/{ask_id}/")
    _sign_in(second, live_server.url, "ben", f"/asks/{ask_id}/")
    first.click("button.approve:has-text('Approve')")
    expect(first.locator(".quorum")).to_contain_text("Approved so far by ann")
    expect(first.locator(".quorum")).to_contain_text("waiting for 1 more")
    waiter.join(1)
    assert waiter.is_alive(), "the agent heard a decision after one approval of two"

    second.reload()
    expect(second.locator(".quorum-approval")).to_have_text("ann")
    second.click("button.approve:has-text('Approve')")
    expect(second.locator("#decision-panel")).to_contain_text("Approved by ann and ben")
    waiter.join(10)
    status, body = waiter.answer
    assert status == 200
    assert body["status"] == "decided"
    assert body["decision"]["by"] == "ann and ben"


def test_a_standing_approval_decides_the_next_ask_then_is_revoked(
    live_server: Any, new_page: Any, project: Project, django_user_model: Any
):
    people(django_user_model, project, "ann")
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=True)
    secret = agent_key_create(project=project, scopes=["asks"])[1]
    first = _open(live_server.url, secret, "first", 400)

    page = new_page()
    _sign_in(page, live_server.url, "ann", f"/asks/{first}/")
    page.click("summary:has-text('Approve this and the same calls')")
    page.fill("input[name=minutes]", "30")
    page.fill("textarea[name=pattern]", '{"amount": {"min": 0, "max": 1000}, "to": "ACC-900"}')
    page.select_option("select[name=agent]", "any")
    page.click("button:has-text('Approve this and the same calls')")
    expect(page.locator("#decision-panel")).to_contain_text("Approved by ann")

    covered = _open(live_server.url, secret, "second", 900)
    status, body = _api(live_server.url, secret, "GET", f"/api/v1/asks/{covered}/decision?wait=0")
    assert status == 200
    assert body["status"] == "decided"
    assert "standing approval" in body["decision"]["note"]

    page.goto(f"{live_server.url}/projects/{project.slug}/standing-approvals/")
    expect(page.locator(".standing-approval")).to_contain_text("amount from 0 to 1000")
    expect(page.locator(".standing-approval")).to_contain_text("Decided 1 ask since")
    page.click("button:has-text('Revoke now')")
    expect(page.locator(".empty")).to_contain_text("None in force")

    after = _open(live_server.url, secret, "third", 900)
    status, body = _api(live_server.url, secret, "GET", f"/api/v1/asks/{after}/decision?wait=0")
    assert body == {"status": "open"}
