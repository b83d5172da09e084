"""What the approver tests share: a `transfer_funds` ask with the arguments it would run with, the
treasury group, and people of the project."""

import itertools
from typing import Any

import orjson
from django.contrib.auth.models import User

from ledger.asks.approvers import approver_group_create, approver_group_member_add
from ledger.asks.services import ask_open
from ledger.models import ApproverGroup, Ask
from tenancy.models import AgentKey, Membership, Project
from tests.conftest import person

TOOL = "transfer_funds"
_calls = itertools.count(1)


def transfer_ask(
    project: Project,
    *,
    amount: float = 5000,
    to: str = "ACC-900",
    run_id: str = "run-treasury-1",
    key: AgentKey | None = None,
    tool: str = TOOL,
) -> Ask:
    """A middleware ask on a transfer, its arguments in the checkpoint (as the framework pauses)."""
    call_id = f"call-{next(_calls)}"
    checkpoint = {"sharedState": {"pausedAskArgs": {"amount": amount, "to": to}}}
    ask, _ = ask_open(
        project=project,
        key=key,
        run_id=run_id,
        session_id=None,
        pause_data={"toolCallId": call_id, "toolName": tool, "ask": {"question": f"Transfer {amount} to {to}?"}},
        checkpoint=orjson.dumps(checkpoint),
        deadline=None,
        on_timeout="decline",
    )
    return ask


def people(django_user_model: Any, project: Project, *names: str, role: str = Membership.Role.APPROVER) -> list[User]:
    return [person(django_user_model, name, project, role) for name in names]


def treasury(project: Project, *members: User) -> ApproverGroup:
    group = approver_group_create(project=project, name="treasury")
    for member in members:
        approver_group_member_add(group=group, username=member.get_username())
    return group
