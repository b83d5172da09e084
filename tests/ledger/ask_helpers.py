"""What the asks tests post and how: the b fixture's paused outcome, and the API calls around it;
and for the tests of concurrent requests, a request in a thread and a wait for backends to queue."""

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection, connections

from tenancy.models import AgentKey, Project
from tenancy.services import agent_key_create
from tests.conftest import ApiClient, load_fixture

ASKS = "/api/v1/asks"
B_OUTCOME = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
B_CHECKPOINT = load_fixture("b-middleware/ask-checkpoint.json")
B_RUN = "run-1796043009968-3"


def secret_of(client: ApiClient) -> str:
    return str(client.defaults["HTTP_AUTHORIZATION"]).removeprefix("Bearer ")


def sibling(project: Project, scopes: list[str] | None = None) -> ApiClient:
    """Another agent key of the same project (every scope unless `scopes` says)."""
    return ApiClient(agent_key_create(project=project, scopes=scopes or list(AgentKey.Scope.values))[1])


def b_body(run_id: str = B_RUN, **extra: Any) -> dict[str, Any]:
    """What an agent posts: the paused outcome (with its real checkpoint) plus runId."""
    return {**copy.deepcopy(B_OUTCOME), "checkpoint": copy.deepcopy(B_CHECKPOINT), "runId": run_id, **extra}


def plain_body(tool_call_id: str = "q1", run_id: str = "run-q") -> dict[str, Any]:
    return {"runId": run_id, "pauseData": {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"}}


def open_ask(client: ApiClient, body: dict[str, Any] | None = None, status: int = 201) -> dict[str, Any]:
    """POST the body (the b outcome by default); the ask the server answers with."""
    response = client.post_json(ASKS, body if body is not None else b_body())
    assert response.status_code == status, response.content
    ask: dict[str, Any] = response.json()["ask"]
    return ask


def decide(client: ApiClient, ask_id: int, **body: Any) -> Any:
    return client.post_json(f"{ASKS}/{ask_id}/decision", body)


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    """The refusal's body, once it is the `status` and `code` expected, with a sentence."""
    assert response.status_code == status, response.content
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str)
    assert body["error"]
    return body


def in_thread(target: Callable[[], Any], out: dict[str, Any], name: str) -> threading.Thread:
    """Run `target` in a thread of its own (its own connection); its result or exception lands in out[name]."""

    def run() -> None:
        try:
            out[name] = target()
        except BaseException as exc:  # reported by the test
            out[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def waiting_on_locks(count: int, wait_event: str | None = None, deadline_s: float = 20) -> None:
    """Until `count` other backends wait on a heavyweight lock (of `wait_event`, e.g. 'advisory', when given)."""
    deadline = time.monotonic() + deadline_s
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND wait_event_type = 'Lock' AND (%s::text IS NULL OR wait_event = %s::text)"
    )
    with connection.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction sees the view as it first read it
            cur.execute(query, [wait_event, wait_event])
            (waiting,) = cur.fetchone()  # type: ignore[misc]
            if waiting >= count:
                return
            time.sleep(0.01)
    raise AssertionError(f"never saw {count} backend(s) waiting on a lock ({wait_event or 'any'})")
