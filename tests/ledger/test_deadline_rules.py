"""A project's deadline rules: refusals naming the field, the deadline an ask gets, escalation steps
notified once each, and the default applied by the deadline with the rule's note."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.asks import deadline_rules, notifications
from ledger.asks import services as ask_services
from ledger.asks.deadline_rules import DeadlineRuleInvalid
from ledger.models import Ask, AskEscalation, DeadlineRule, WebhookDelivery
from tenancy.models import AdminChange, Project
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import open_ask, plain_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def known_tool(project: Project, agent_client: ApiClient) -> str:
    """`ask_user` is a tool the project's runs have asked about, and two channels exist."""
    open_ask(agent_client, plain_body(run_id="run-seen"))
    Ask.objects.filter(run_id="run-seen").update(status=Ask.Status.DECIDED, decided_at=timezone.now())
    for name in ("on-call", "leads"):
        notifications.notification_channel_set(project=project, name=name, kind="email", target=f"{name}@example.com")
    return "ask_user"


@pytest.mark.parametrize(
    ("fields", "sentence"),
    [
        ({"tool_name": "transfer_funds"}, "tool_name: no run of this project has called or asked about a tool"),
        ({"tool_name": ""}, "tool_name: name either a tool or a middleware"),
        ({"tool_name": "ask_user", "middleware": "guard"}, "tool_name: name either a tool or a middleware"),
        ({"tool_name": "", "middleware": "guard"}, "middleware: no ask of this project came from a middleware named"),
        ({"deadline_minutes": 0}, "deadline_minutes: a whole number from 1"),
        ({"on_timeout": "maybe"}, "on_timeout: 'decline' or 'approve'"),
        (
            {"escalation": [{"afterMinutes": 20, "notify": "on-call"}, {"afterMinutes": 10, "notify": "leads"}]},
            "escalation, step 2: after 10 min comes no later than the step before it (20 min)",
        ),
        ({"escalation": [{"afterMinutes": 30, "notify": "on-call"}]}, "escalation, step 1: after 30 min is not before"),
        ({"escalation": [{"afterMinutes": 5, "notify": "nobody"}]}, "escalation, step 1: no notification channel"),
        (
            {
                "escalation": [
                    {"afterMinutes": 5, "notify": "on-call"},
                    {"afterMinutes": 10, "notify": "leads"},
                    {"afterMinutes": 15, "notify": "on-call"},
                ]
            },
            "escalation, step 3: 'on-call' was already notified at step 1; an escalation that comes back",
        ),
    ],
)
def test_rule_set_refuses_with_a_sentence_naming_the_field(
    project: Project, known_tool: str, fields: dict[str, Any], sentence: str
) -> None:
    arguments = {"tool_name": known_tool, "deadline_minutes": 30, **fields}
    with pytest.raises(DeadlineRuleInvalid) as refused:
        deadline_rules.deadline_rule_set(project=project, **arguments)
    assert sentence in refused.value.message
    assert not DeadlineRule.objects.exists()


def test_escalation_lines_are_read_and_a_bad_line_is_named() -> None:
    assert deadline_rules.escalation_parse("after 10 min notify on-call\n\n30 leads") == [
        {"afterMinutes": 10, "notify": "on-call"},
        {"afterMinutes": 30, "notify": "leads"},
    ]
    with pytest.raises(DeadlineRuleInvalid, match="escalation, line 2"):
        deadline_rules.escalation_parse("10 on-call\nwhenever someone")


def test_an_ask_opened_under_a_rule_gets_its_deadline_escalates_once_per_step_and_the_default_applies(
    project: Project, agent_client: ApiClient, known_tool: str
) -> None:
    deadline_rules.deadline_rule_set(
        project=project,
        tool_name=known_tool,
        deadline_minutes=30,
        note="Nobody on call answered: declined, ask again in office hours.",
        escalation=[{"afterMinutes": 10, "notify": "on-call"}, {"afterMinutes": 20, "notify": "leads"}],
    )
    opened = open_ask(agent_client, plain_body(run_id="run-ruled"))
    ask = Ask.objects.get(pk=opened["id"])
    assert ask.deadline is not None
    assert timedelta(minutes=29) < ask.deadline - timezone.now() <= timedelta(minutes=30)
    assert ask.on_timeout == Ask.OnTimeout.DECLINE
    escalations = WebhookDelivery.objects.filter(ask=ask, event=WebhookDelivery.Event.ESCALATION)

    assert deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=5)) == 0
    assert deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=11)) == 1
    assert deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=11)) == 0
    assert list(escalations.values_list("step", "channel__name")) == [(1, "on-call")]
    assert deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=21)) == 1
    assert sorted(escalations.values_list("step", "channel__name")) == [(1, "on-call"), (2, "leads")]
    assert AskEscalation.objects.get(ask=ask).next_at is None

    assert ask_services.asks_apply_deadlines(now=timezone.now() + timedelta(minutes=31)) == 1
    ask.refresh_from_db()
    assert ask.decision() == {
        "approved": False,
        "by": "deadline",
        "at": ask.at_ms,
        "note": "Nobody on call answered: declined, ask again in office hours.",
    }
    assert ask.decided_via == Ask.Via.DEADLINE


def test_an_approve_default_only_where_the_rule_says_so(
    project: Project, agent_client: ApiClient, known_tool: str
) -> None:
    rule = deadline_rules.deadline_rule_set(
        project=project, tool_name=known_tool, deadline_minutes=5, on_timeout=Ask.OnTimeout.APPROVE
    )
    assert rule.on_timeout == Ask.OnTimeout.APPROVE
    opened = open_ask(agent_client, plain_body(run_id="run-approve"))
    ask_services.asks_apply_deadlines(now=timezone.now() + timedelta(minutes=6))
    assert Ask.objects.get(pk=opened["id"]).approved is True


def test_an_agents_own_deadline_stands(project: Project, agent_client: ApiClient, known_tool: str) -> None:
    deadline_rules.deadline_rule_set(project=project, tool_name=known_tool, deadline_minutes=30)
    own = (timezone.now() + timedelta(minutes=2)).replace(microsecond=0)
    opened = open_ask(agent_client, {**plain_body(run_id="run-own"), "deadline": own.isoformat()})
    assert Ask.objects.get(pk=opened["id"]).deadline == own


def test_an_approaching_deadline_is_announced_once(
    project: Project, agent_client: ApiClient, known_tool: str, settings: Any
) -> None:
    settings.FOOTPRINT_DEADLINE_WARNING_MINUTES = 5
    deadline_rules.deadline_rule_set(project=project, tool_name=known_tool, deadline_minutes=30)
    opened = open_ask(agent_client, plain_body(run_id="run-near"))
    near = WebhookDelivery.objects.filter(ask_id=opened["id"], event=WebhookDelivery.Event.DEADLINE_NEAR)
    deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=10))
    assert not near.exists()
    deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=26))
    deadline_rules.escalations_run(now=timezone.now() + timedelta(minutes=27))
    assert sorted(near.values_list("channel__name", flat=True)) == ["leads", "on-call"]


def test_rule_changes_are_recorded_as_admin_changes(project: Project, known_tool: str) -> None:
    rule = deadline_rules.deadline_rule_set(project=project, tool_name=known_tool, deadline_minutes=30)
    deadline_rules.deadline_rule_set(project=project, tool_name=known_tool, deadline_minutes=30)  # no change
    deadline_rules.deadline_rule_set(project=project, tool_name=known_tool, deadline_minutes=45)
    deadline_rules.deadline_rule_delete(project=project, rule_id=rule.pk)
    changes = AdminChange.objects.filter(project=project, target_type="deadline_rule").order_by("id")
    assert [
        (c.action, (c.before or {}).get("deadlineMinutes"), (c.after or {}).get("deadlineMinutes")) for c in changes
    ] == [
        (AdminChange.Action.DEADLINE_RULE_SET, None, 30),
        (AdminChange.Action.DEADLINE_RULE_SET, 30, 45),
        (AdminChange.Action.DEADLINE_RULE_REMOVED, 45, None),
    ]
    assert changes[0].target_label == "deadline rule for tool ask_user"


def test_a_worker_killed_mid_escalation_leaves_the_step_to_the_next_pass(
    project: Project, agent_client: ApiClient, known_tool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's claim and its messages commit together: a pass that dies between them (here, an
    error as the messages are written) takes no step, and the next pass takes it once."""
    deadline_rules.deadline_rule_set(
        project=project, tool_name=known_tool, deadline_minutes=30, escalation=[{"afterMinutes": 10, "notify": "leads"}]
    )
    opened = open_ask(agent_client, plain_body(run_id="run-killed"))
    later = timezone.now() + timedelta(minutes=11)

    def dies(**kwargs: Any) -> int:
        raise SystemExit("worker killed")

    monkeypatch.setattr(notifications, "notifications_queue", dies)
    with pytest.raises(SystemExit):
        deadline_rules.escalations_run(now=later)
    escalation = AskEscalation.objects.get(ask_id=opened["id"])
    assert (escalation.next_step, escalation.next_at is not None) == (0, True)
    monkeypatch.undo()
    assert deadline_rules.escalations_run(now=later) == 1
    sent = WebhookDelivery.objects.filter(ask_id=opened["id"], event=WebhookDelivery.Event.ESCALATION)
    assert list(sent.values_list("channel__name", flat=True)) == ["leads"]
