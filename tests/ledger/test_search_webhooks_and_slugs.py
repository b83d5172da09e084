"""Search over events too large to index whole, webhooks that answer with a redirect or not with
HTTP at all, and project slugs the pages can link to."""

import contextlib
import io
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from ledger.asks.services import ask_decide, ask_open
from ledger.asks.webhooks import WebhookFailed, webhook_deliver, webhooks_send_due
from ledger.models import Ask, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.models import Project
from tests.conftest import ApiClient
from tests.http_receiver import serving, url_of

pytestmark = pytest.mark.django_db


# --- helpers ------------------------------------------------------------------------------------


def _event(run_id: str, seq: int, payload: Any) -> dict[str, Any]:
    return {"seq": seq, "type": "agentfootprint.agent.turn_start", "payload": payload, "meta": {"runId": run_id}}


def _many_distinct_words(n: int = 160_000) -> str:
    """About 1.2 MB of distinct words: a long tool result (a file, a web page) looks like this."""
    return " ".join(f"w{i}" for i in range(n))


def _decided_ask(project: Project, url: str, tool_call_id: str, captured: Callable[..., Any]) -> WebhookDelivery:
    WebhookEndpoint.objects.update_or_create(project=project, defaults={"url": url, "secret": "s3cret"})
    ask, _ = ask_open(
        project=project,
        key=None,
        run_id=f"run-{tool_call_id}",
        session_id=None,
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
        pause_data={"toolCallId": tool_call_id, "toolName": "pay", "ask": {"question": "Pay?", "middleware": "m"}},
    )
    with captured(execute=False):  # the fast path's queue message is lost: the sweep must send it
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot")
    return WebhookDelivery.objects.get(ask=ask)


# --- search -------------------------------------------------------------------------------------


def test_run_search_of_another_project_still_answers_when_one_event_has_over_1mb_of_words(
    agent_client: ApiClient, other_agent_client: ApiClient, outsider_client: Client
) -> None:
    """One project's large event must not turn every project's run search into a 500."""
    response = agent_client.ingest([_event("big-run", 0, {"result": _many_distinct_words()})])
    assert response.status_code == 200, response.content[:300]
    assert other_agent_client.ingest([_event("their-run", 0, {"text": "needle"})]).status_code == 200

    api = other_agent_client.get("/api/v1/runs?q=needle")
    assert api.status_code == 200, api.content[:300]
    assert [r["runId"] for r in api.json()["runs"]] == ["their-run"]
    page = outsider_client.get("/runs/?q=needle")
    assert page.status_code == 200
    assert "their-run" in page.content.decode()


def test_search_indexer_indexes_runs_after_one_with_an_event_of_over_1mb_of_words(
    agent_client: ApiClient,
) -> None:
    """The worker's index pass must not fail for good on one large event and starve later runs."""
    from ledger.explorer.search import search_index_pending
    from ledger.models import Run

    assert agent_client.ingest([_event("big-run", 0, {"result": _many_distinct_words()})]).status_code == 200
    assert agent_client.ingest([_event("later-run", 0, {"text": "needle"})]).status_code == 200

    search_index_pending(budget_seconds=5)

    later = Run.objects.get(run_id="later-run")
    assert later.search_indexed == later.chain_length


# --- webhooks -----------------------------------------------------------------------------------


def test_a_webhook_answered_with_a_redirect_is_not_marked_delivered_without_the_post_arriving(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """A 302 turns urllib's POST into a body-less GET: the decision never arrives, yet it counts as delivered."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.server.received.append(("POST", self.path))  # type: ignore[attr-defined]
            self.send_response(302)
            self.send_header("Location", "/moved")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self.server.received.append(("GET", self.path))  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as server:
        delivery = _decided_ask(project, url_of(server), "t1", django_capture_on_commit_callbacks)
        with contextlib.suppress(WebhookFailed):
            webhook_deliver(delivery_id=delivery.pk)
        received = list(server.received)  # type: ignore[attr-defined]

    delivery.refresh_from_db()
    posts_with_the_decision = [r for r in received if r[0] == "POST" and r[1] == "/moved"]
    assert delivery.status != WebhookDelivery.Status.DELIVERED or posts_with_the_decision, received


class _GarbageHandler(socketserver.StreamRequestHandler):
    """Answers every request with a line that is not HTTP (a misconfigured proxy, a TLS port)."""

    def handle(self) -> None:
        self.rfile.readline()
        self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


def test_the_outbox_sweep_logs_an_answer_that_is_not_http_and_still_sends_the_other_deliveries(
    django_capture_on_commit_callbacks: Any, project: Project, other_project: Project
) -> None:
    """A receiver answering garbage is a failed, logged, rescheduled attempt; it must not abort the sweep."""
    garbage = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _GarbageHandler)
    threading.Thread(target=garbage.serve_forever, daemon=True).start()

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.server.received.append(self.path)  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        with serving(Ok) as ok:
            bad = _decided_ask(project, url_of(garbage), "g1", django_capture_on_commit_callbacks)
            good = _decided_ask(other_project, url_of(ok), "g2", django_capture_on_commit_callbacks)

            error: BaseException | None = None
            try:
                webhooks_send_due()
            except Exception as exc:  # the defect: the sweep dies here
                error = exc
            received = list(ok.received)  # type: ignore[attr-defined]
    finally:
        garbage.shutdown()
        garbage.server_close()

    attempt = WebhookAttempt.objects.get(delivery=bad)
    bad.refresh_from_db()
    good.refresh_from_db()
    assert error is None, f"the sweep raised {error!r}"
    assert received == ["/hooks/decisions"]
    assert good.status == WebhookDelivery.Status.DELIVERED
    assert bad.status == WebhookDelivery.Status.FAILED
    assert bad.lease_until is None
    assert attempt.error
    assert attempt.error != "no answer recorded (the attempt was cut short)"


# --- management commands and tenancy ------------------------------------------------------------


def test_create_agent_key_refuses_a_project_slug_the_pages_cannot_link_to(
    django_user_model: Any,
) -> None:
    """`--project acme.prod` makes a project whose runs break the run list (NoReverseMatch → 500)."""
    try:
        out = io.StringIO()
        call_command("create_agent_key", "--project", "acme.prod", stdout=out, stderr=io.StringIO())
    except CommandError:
        return  # refused, naming the problem: fine
    agent = ApiClient(out.getvalue().splitlines()[-1])
    assert agent.ingest([_event("r1", 0, {})]).status_code == 200
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = Client(raise_request_exception=False)
    client.force_login(admin)
    assert client.get("/").status_code == 200
