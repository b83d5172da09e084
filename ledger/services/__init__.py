"""Writes. Each service is one transaction; the HTTP layers call exactly one of them."""

from ledger.services.asks import NO_VALUE, ask_decide, ask_open, asks_apply_deadlines
from ledger.services.ingest import events_ingest
from ledger.services.recordings import recording_ingest
from ledger.services.tenancy import agent_key_create, membership_grant, project_get_or_create

__all__ = [
    "NO_VALUE",
    "agent_key_create",
    "ask_decide",
    "ask_open",
    "asks_apply_deadlines",
    "events_ingest",
    "membership_grant",
    "project_get_or_create",
    "recording_ingest",
]
