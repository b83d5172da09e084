"""Who may decide: approver groups, rules with argument conditions and a quorum of different
people, one decline ending it, nobody approving what their own key asked, and the admin changes
each admin's act leaves."""

from typing import Any

import pytest

from ledger.asks.approver_rules import conditions_match, conditions_parse
from ledger.asks.approver_selectors import quorum_state
from ledger.asks.approvers import (
    approval_rule_create,
    approval_rule_remove,
    approver_group_create,
    approver_group_member_add,
    approver_group_member_remove,
    standing_limits_set,
)
from ledger.asks.services import ask_decide
from ledger.exceptions import (
    ApproverRuleInvalid,
    AskAlreadyDecided,
    AskInvalid,
    AskNotPermitted,
    AskOwnDecision,
)
from ledger.models import Ask, QuorumApproval, RunEvent
from tenancy.models import AdminChange, AgentKey, Project
from tenancy.services import Actor, agent_key_create
from tests.ledger.approver_helpers import TOOL, people, transfer_ask, treasury

pytestmark = pytest.mark.django_db


def _approve(ask: Ask, user: Any, **kwargs: Any) -> Ask:
    return ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.PAGE, by_label=user.get_username(), user=user, **kwargs)


def _decision_events(ask: Ask) -> list[dict[str, Any]]:
    return [
        e.doc["payload"]
        for e in RunEvent.objects.filter(run__run_id=ask.run_id, type="ledger.human_decision").order_by("position")
    ]


def test_a_quorum_of_two_records_the_first_approval_and_decides_on_the_second(project: Project, django_user_model):
    ann, ben, cat = people(django_user_model, project, "ann", "ben", "cat")
    treasury(project, ann, ben, cat)
    transfer_ask(project, amount=10)  # the tool is known to the project before a rule names it
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="amount > 1000")
    ask = transfer_ask(project, amount=5000)

    first = _approve(ask, ann)
    assert first.status == Ask.Status.OPEN
    assert list(QuorumApproval.objects.filter(ask=ask).values_list("by_label", flat=True)) == ["ann"]
    assert _decision_events(ask) == []  # nothing reaches the agent before the quorum is met

    with pytest.raises(AskInvalid, match="one person fills one place"):
        _approve(ask, ann)

    decided = _approve(ask, ben)
    assert decided.status == Ask.Status.DECIDED
    assert decided.approved
    assert decided.decided_by_label == "ann and ben"
    (event,) = _decision_events(ask)
    assert [a["by"] for a in event["approvals"]] == ["ann", "ben"]
    assert event["quorum"] == {"group": "treasury", "of": 2}
    with pytest.raises(AskAlreadyDecided):
        _approve(ask, cat)


def test_a_small_transfer_is_outside_the_rule_and_any_approver_decides_it(project: Project, django_user_model):
    ann, ben, dan = people(django_user_model, project, "ann", "ben", "dan")
    treasury(project, ann, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="amount > 1000")
    small = transfer_ask(project, amount=999)
    assert _approve(small, dan).status == Ask.Status.DECIDED


def test_one_decline_ends_it_and_only_the_group_decides(project: Project, django_user_model):
    ann, ben, dan = people(django_user_model, project, "ann", "ben", "dan")
    treasury(project, ann, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    ask = transfer_ask(project)
    with pytest.raises(AskNotPermitted, match="Only members of group treasury"):
        _approve(ask, dan)
    _approve(ask, ann)
    declined = ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.PAGE, by_label="ben", user=ben, note="no")
    assert declined.status == Ask.Status.DECIDED
    assert declined.approved is False
    assert declined.decided_by_label == "ben"


def test_an_integration_key_cannot_decide_a_call_a_rule_governs(project: Project, django_user_model):
    (ann,) = people(django_user_model, project, "ann")
    treasury(project, ann)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=1, conditions="")
    ask = transfer_ask(project)
    integration = agent_key_create(project=project, scopes=[AgentKey.Scope.DECIDE])[0]
    with pytest.raises(AskNotPermitted, match="an integration's key cannot decide them"):
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot", key=integration)


def test_nobody_approves_what_an_agent_key_they_minted_asked(project: Project, django_user_model):
    ann, ben = people(django_user_model, project, "ann", "ben")
    key = agent_key_create(project=project, scopes=["asks"], actor=Actor.of_user(ann))[0]
    ask = transfer_ask(project, key=key)
    with pytest.raises(AskOwnDecision, match="You minted the agent key"):
        _approve(ask, ann)
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN
    assert _approve(ask, ben).status == Ask.Status.DECIDED


def test_a_question_is_never_answered_empty(project: Project, django_user_model):
    (ann,) = people(django_user_model, project, "ann")
    from ledger.asks.services import ask_open

    ask, _ = ask_open(
        project=project,
        key=None,
        run_id="run-q",
        session_id=None,
        pause_data={"toolCallId": "q1", "toolName": "ask_user", "question": "Region?"},
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
    )
    for empty in ("", "   \n"):
        with pytest.raises(AskInvalid, match="cannot be empty"):
            ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.PAGE, by_label="ann", user=ann, value=empty)
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("amount >", "line 1: write an argument"),
        ("amount > lots", "compares numbers"),
        ("amount > 1000\namount < 500", "no call could meet every condition on amount"),
        ('currency = "EUR"\ncurrency = "USD"', "no call could meet every condition on currency"),
        ("amount = 5\namount > 10", "no call could meet every condition on amount"),
    ],
)
def test_impossible_or_malformed_conditions_are_refused_naming_the_field(text: str, refusal: str):
    with pytest.raises(ApproverRuleInvalid, match=refusal):
        conditions_parse(text)


def test_conditions_match_numbers_and_exact_values():
    conditions = conditions_parse('amount > 1000\ncurrency = "EUR"')
    assert conditions_match(conditions, {"amount": 1001, "currency": "EUR"})
    assert not conditions_match(conditions, {"amount": 1000, "currency": "EUR"})
    assert not conditions_match(conditions, {"amount": "5000", "currency": "EUR"})
    assert not conditions_match(conditions, {"currency": "EUR"})


def test_rules_are_refused_for_unknown_tools_groups_and_unreachable_quorums(project: Project, django_user_model):
    (ann,) = people(django_user_model, project, "ann")
    treasury(project, ann)
    transfer_ask(project)
    with pytest.raises(ApproverRuleInvalid, match="tool_name: no run of project acme has called"):
        approval_rule_create(project=project, tool_name="delete_db", group_name="treasury", quorum=1, conditions="")
    with pytest.raises(ApproverRuleInvalid, match="group: project acme has no approver group named 'ops'"):
        approval_rule_create(project=project, tool_name=TOOL, group_name="ops", quorum=1, conditions="")
    with pytest.raises(ApproverRuleInvalid, match="quorum: group treasury has 1 member, so a quorum of 2"):
        approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    assert not project.approval_rules.exists()


def test_groups_take_only_the_projects_deciders(project: Project, other_project: Project, django_user_model):
    (ann,) = people(django_user_model, project, "ann")
    (aud,) = people(django_user_model, project, "aud", role="auditor")
    (far,) = people(django_user_model, other_project, "far")
    group = approver_group_create(project=project, name="treasury")
    with pytest.raises(ApproverRuleInvalid, match="name: project acme already has a group named 'treasury'"):
        approver_group_create(project=project, name="treasury")
    with pytest.raises(ApproverRuleInvalid, match="name must be 1 to 64"):
        approver_group_create(project=project, name="a b")
    for outsider in (aud, far):
        with pytest.raises(ApproverRuleInvalid, match="is not an approver or admin of this project"):
            approver_group_member_add(group=group, username=outsider.get_username())
    approver_group_member_add(group=group, username="ann")
    approver_group_member_remove(group=group, user_id=ann.pk)
    assert not group.members.exists()


def test_every_admin_act_is_recorded_as_an_admin_change(project: Project, django_user_model):
    ann, boss = people(django_user_model, project, "ann", "boss")
    actor = Actor.of_user(boss)
    transfer_ask(project)
    group = approver_group_create(project=project, name="treasury", actor=actor)
    approver_group_member_add(group=group, username="ann", actor=actor)
    rule = approval_rule_create(
        project=project, tool_name=TOOL, group_name="treasury", quorum=1, conditions="amount > 10", actor=actor
    )
    approval_rule_remove(rule=rule, actor=actor)
    approver_group_member_remove(group=group, user_id=ann.pk, actor=actor)
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=True, actor=actor)
    actions = list(
        AdminChange.objects.filter(project=project, actor=boss).order_by("pk").values_list("action", flat=True)
    )
    assert actions == [
        "approver_group_created",
        "approver_added",
        "approval_rule_added",
        "approval_rule_removed",
        "approver_removed",
        "standing_limits_changed",
    ]
    with pytest.raises(ApproverRuleInvalid, match="max_minutes must be from 0"):
        standing_limits_set(project=project, max_minutes=-1, allow_any_agent=False)


def test_an_approval_by_someone_taken_out_of_the_group_no_longer_counts(project: Project, django_user_model):
    ann, ben, cat = people(django_user_model, project, "ann", "ben", "cat")
    group = treasury(project, ann, ben, cat)
    transfer_ask(project, amount=10)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    ask = transfer_ask(project, amount=5000)

    assert _approve(ask, ann).status == Ask.Status.OPEN
    approver_group_member_remove(group=group, user_id=ann.pk)
    still_open = _approve(ask, ben)  # ann's approval lapsed with her membership: one of two so far
    assert still_open.status == Ask.Status.OPEN
    assert _decision_events(ask) == []
    state = quorum_state(ask=ask)
    assert state is not None
    assert [a.by_label for a in state.approvals] == ["ben"]
    assert [a.by_label for a in state.lapsed] == ["ann"]
    assert (state.remaining, state.unfulfillable) == (1, False)

    decided = _approve(ask, cat)
    assert decided.status == Ask.Status.DECIDED
    assert decided.decided_by_label == "ben and cat"
    (event,) = _decision_events(ask)
    assert [a["by"] for a in event["approvals"]] == ["ben", "cat"]


def test_a_group_smaller_than_its_quorum_is_unfulfillable_and_such_a_rule_is_refused(
    project: Project, django_user_model
):
    ann, ben = people(django_user_model, project, "ann", "ben")
    group = treasury(project, ann, ben)
    transfer_ask(project, amount=10)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    ask = transfer_ask(project, amount=5000)
    assert _approve(ask, ann).status == Ask.Status.OPEN
    approver_group_member_remove(group=group, user_id=ben.pk)

    state = quorum_state(ask=ask)
    assert state is not None
    assert (state.members, state.unfulfillable) == (1, True)
    with pytest.raises(ApproverRuleInvalid, match="group treasury has 1 member, so a quorum of 2 could never be met"):
        approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    declined = ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.PAGE, by_label="ann", user=ann)
    assert (declined.status, declined.approved) == (Ask.Status.DECIDED, False)  # one decline still ends it
