"""GET /api/v1/standing-approvals: the project's standing approvals in force, with the read scope."""

from typing import Any

import pytest

from ledger.asks.approvers import standing_limits_set
from ledger.asks.standing import standing_approval_grant, standing_approval_revoke
from tenancy.models import Project
from tests.conftest import ApiClient, _key
from tests.ledger.approver_helpers import people, transfer_ask

pytestmark = pytest.mark.django_db
PATH = "/api/v1/standing-approvals"


def test_lists_those_in_force_with_what_they_decided(project: Project, other_project: Project, django_user_model: Any):
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=True)
    (ann,) = people(django_user_model, project, "ann")
    pattern = {"amount": {"max": 1000}, "to": "ACC-900"}
    kept = standing_approval_grant(
        ask_id=transfer_ask(project, amount=5).pk, user=ann, minutes=30, pattern=pattern, any_agent=True
    )
    transfer_ask(project, amount=7, run_id="run-covered")
    gone = standing_approval_grant(
        ask_id=transfer_ask(project, amount=5, to="ACC-1", run_id="run-x").pk,
        user=ann,
        minutes=30,
        pattern={"amount": 5, "to": "ACC-1"},
        any_agent=True,
    )
    standing_approval_revoke(standing=gone, user=ann)

    response = ApiClient(_key(project, ["read"])).get(PATH)
    assert response.status_code == 200, response.content
    (listed,) = response.json()["standingApprovals"]
    assert listed["id"] == kept.pk
    assert listed["toolName"] == "transfer_funds"
    assert listed["pattern"] == pattern
    assert listed["grantedBy"] == "ann"
    assert listed["decided"] == 1
    assert listed["expiresAt"].endswith("Z")
    assert "agentId" not in listed

    assert ApiClient(_key(other_project, ["read"])).get(PATH).json() == {"standingApprovals": []}
    refused = ApiClient(_key(project, ["asks"])).get(PATH)
    assert refused.status_code == 403
