"""Standing approvals: granted by approving an ask within the project's limits, no wider than what
it showed; later asks they cover are decided at once, each naming it; revocation ends them and is
chained."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.asks.approvers import approval_rule_create, standing_limits_set
from ledger.asks.services import ask_decide
from ledger.asks.standing import standing_approval_grant, standing_approval_revoke
from ledger.exceptions import AskNotPermitted, StandingApprovalInvalid
from ledger.models import Ask, Run, RunEvent, StandingApproval
from tenancy.models import Project
from tenancy.services import Actor, agent_key_create
from tests.ledger.approver_helpers import TOOL, people, transfer_ask, treasury

pytestmark = pytest.mark.django_db
WIDE = {"amount": {"min": 0, "max": 1000}, "to": "ACC-900"}


def _grant(ask: Ask, user: Any, **kwargs: Any) -> StandingApproval:
    arguments = {"minutes": 30, "pattern": WIDE, "any_agent": True, **kwargs}
    return standing_approval_grant(ask_id=ask.pk, user=user, **arguments)


def _chain(run_id: str, type_: str) -> list[dict[str, Any]]:
    events = RunEvent.objects.filter(run__run_id=run_id, type=type_).order_by("position")
    return [e.doc["payload"] for e in events]


@pytest.fixture
def ann(project: Project, django_user_model: Any) -> Any:
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=True)
    return people(django_user_model, project, "ann")[0]


def test_a_standing_approval_decides_the_next_covered_ask_at_once_and_is_chained(project: Project, ann: Any):
    first = transfer_ask(project, amount=500)
    standing = _grant(first, ann)
    first.refresh_from_db()
    assert first.status == Ask.Status.DECIDED
    assert first.standing_approval == standing
    (granted,) = _chain(first.run_id, "ledger.human_decision")
    assert granted["standingApproval"]["grantedBy"] == "ann"
    assert granted["standingApproval"]["pattern"] == WIDE

    later = transfer_ask(project, amount=900, run_id="run-treasury-2")
    assert later.status == Ask.Status.DECIDED
    assert later.decided_via == Ask.Via.STANDING
    assert later.approved is True
    assert later.decided_by_label == "ann"
    assert later.standing_approval == standing
    (decision,) = _chain("run-treasury-2", "ledger.human_decision")
    assert decision["via"] == "standing"
    assert decision["standingApproval"]["id"] == standing.pk


@pytest.mark.parametrize(
    "later",
    [
        {"amount": 1001},  # beyond the bound
        {"to": "ACC-1"},  # another account
        {"tool": "pay_invoice"},  # another tool
    ],
)
def test_calls_outside_the_pattern_stay_open_for_a_person(project: Project, ann: Any, later: dict[str, Any]):
    _grant(transfer_ask(project, amount=500), ann)
    assert transfer_ask(project, run_id="run-later", **later).status == Ask.Status.OPEN


def test_an_argument_the_person_did_not_see_is_not_covered(project: Project, ann: Any):
    from ledger.asks.approver_rules import pattern_match

    assert not pattern_match(WIDE, {"amount": 5, "to": "ACC-900", "memo": "x"})
    assert not pattern_match(WIDE, {"amount": True, "to": "ACC-900"})


@pytest.mark.parametrize(
    ("pattern", "refusal"),
    [
        ({"amount": 500}, "leaves out to"),
        ({**WIDE, "memo": "x"}, "names arguments the ask did not show: memo"),
        ({"amount": {"min": 600}, "to": "ACC-900"}, "must hold the value the ask showed"),
        ({"amount": {"min": 10, "max": 5}, "to": "ACC-900"}, "min .10. is above max .5."),
        ({"amount": 500, "to": "ACC-1"}, "pattern.to must be the value the ask showed"),
        ({"amount": 500, "to": {"min": 1}}, "pattern.to must be the value the ask showed"),
        ([], "pattern must be a JSON object"),
    ],
)
def test_nothing_wider_than_what_the_ask_showed(project: Project, ann: Any, pattern: Any, refusal: str):
    ask = transfer_ask(project, amount=500)
    with pytest.raises(StandingApprovalInvalid, match=refusal):
        _grant(ask, ann, pattern=pattern)
    assert not StandingApproval.objects.exists()
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN


def test_the_projects_limits_bound_it(project: Project, ann: Any):
    ask = transfer_ask(project, amount=500)
    with pytest.raises(StandingApprovalInvalid, match="minutes must be from 1 to 60"):
        _grant(ask, ann, minutes=61)
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=False)
    with pytest.raises(StandingApprovalInvalid, match="agent: project acme allows standing approvals for the asking"):
        _grant(ask, ann)
    with pytest.raises(StandingApprovalInvalid, match="this run names no agent"):
        _grant(ask, ann, any_agent=False)
    standing_limits_set(project=project, max_minutes=0, allow_any_agent=False)
    with pytest.raises(StandingApprovalInvalid, match="Standing approvals are off in project acme"):
        _grant(ask, ann)


def test_same_agent_covers_only_that_agents_runs(project: Project, ann: Any):
    Run.objects.create(project=project, run_id="run-a1", agent_id="agent-a")
    Run.objects.create(project=project, run_id="run-b1", agent_id="agent-b")
    Run.objects.create(project=project, run_id="run-a2", agent_id="agent-a")
    _grant(transfer_ask(project, amount=500, run_id="run-a1"), ann, any_agent=False)
    assert transfer_ask(project, amount=10, run_id="run-b1").status == Ask.Status.OPEN
    assert transfer_ask(project, amount=10, run_id="run-a2").status == Ask.Status.DECIDED


def test_a_quorum_rule_is_never_filled_by_a_standing_approval(project: Project, ann: Any, django_user_model: Any):
    (ben,) = people(django_user_model, project, "ben")
    treasury(project, ann, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="amount > 100")
    with pytest.raises(StandingApprovalInvalid, match="need 2 different people of group treasury"):
        _grant(transfer_ask(project, amount=500), ann)
    standing = _grant(transfer_ask(project, amount=50), ann, pattern={"amount": {"max": 1000}, "to": "ACC-900"})
    assert transfer_ask(project, amount=500, run_id="run-big").status == Ask.Status.OPEN
    assert transfer_ask(project, amount=60, run_id="run-small").standing_approval == standing


def test_a_group_rule_needs_a_grantor_of_the_group(project: Project, ann: Any, django_user_model: Any):
    (ben,) = people(django_user_model, project, "ben")
    treasury(project, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=1, conditions="")
    with pytest.raises(AskNotPermitted, match="Only members of group treasury"):
        _grant(transfer_ask(project, amount=500), ann)
    assert not StandingApproval.objects.exists()


def test_it_never_approves_what_its_grantors_own_key_asked(project: Project, ann: Any):
    _grant(transfer_ask(project, amount=500), ann)
    own = agent_key_create(project=project, scopes=["asks"], actor=Actor.of_user(ann))[0]
    assert transfer_ask(project, amount=10, run_id="run-own", key=own).status == Ask.Status.OPEN


def test_revoked_or_expired_it_decides_nothing_and_the_revocation_is_chained(project: Project, ann: Any):
    first = transfer_ask(project, amount=500)
    standing = _grant(first, ann)
    standing_approval_revoke(standing=standing, user=ann)
    assert standing.revoked_by_label == "ann"
    (revoked,) = _chain(first.run_id, "ledger.standing_approval_revoked")
    assert revoked["standingApprovalId"] == standing.pk
    assert revoked["revokedBy"] == "ann"
    assert transfer_ask(project, amount=10, run_id="run-after").status == Ask.Status.OPEN
    with pytest.raises(StandingApprovalInvalid, match="was revoked by ann"):
        standing_approval_revoke(standing=standing, user=ann)

    expired = _grant(transfer_ask(project, amount=500, run_id="run-again"), ann)
    StandingApproval.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert transfer_ask(project, amount=10, run_id="run-late").status == Ask.Status.OPEN
    with pytest.raises(StandingApprovalInvalid, match="expired at"):
        standing_approval_revoke(standing=expired, user=ann)


def test_a_question_cannot_start_one(project: Project, ann: Any):
    from ledger.asks.services import ask_open

    question, _ = ask_open(
        project=project,
        key=None,
        run_id="run-q",
        session_id=None,
        pause_data={"toolCallId": "q1", "toolName": "ask_user", "question": "Region?"},
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
    )
    with pytest.raises(StandingApprovalInvalid, match="a question, a takeover or a consent is decided each time"):
        _grant(question, ann)
    ask_decide(ask_id=question.pk, approved=True, via=Ask.Via.PAGE, by_label="ann", user=ann, value="EU")
