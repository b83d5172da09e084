"""The edges of the background work. The webhook outbox: a claim re-checks that a delivery is
due and under the attempt cap (the outbox is the one retry schedule, the task makes one attempt),
sends nothing while the project's webhook is off or deleted and resumes once it is set again,
POSTs to the endpoint's current URL and logs it on the attempt, records a fault as a failed
attempt without stopping the sweep, and a slow attempt that outlasts its lease cannot undo a
later attempt's delivery. Deadlines: the pass skips an ask deleted while it runs, a
passed deadline stands against a late decision, and a re-post adds a missing deadline. The
integrity-check task is a no-op for a check deleted with its run."""

import io
import threading
from contextlib import suppress
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from ledger import tasks
from ledger.asks import services as asks_service
from ledger.asks import webhooks
from ledger.asks.services import ask_decide, ask_open, asks_apply_deadlines
from ledger.asks.webhooks import MAX_ATTEMPTS, WebhookFailed, webhook_deliver, webhooks_send_due
from ledger.exceptions import AskAlreadyDecided, AskInvalid
from ledger.models import Ask, IntegrityCheck, Run, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.models import Project
from tests.conftest import ApiClient
from tests.http_receiver import url_of, webhook_receiver
from tests.ledger.ask_helpers import in_thread, open_ask, plain_body

pytestmark = pytest.mark.django_db


# --- helpers ------------------------------------------------------------------------------------


def _open(project: Project, tool_call_id: str, **kwargs: Any) -> Ask:
    arguments: dict[str, Any] = {
        "key": None,
        "session_id": None,
        "checkpoint": None,
        "deadline": None,
        "on_timeout": "decline",
        **kwargs,
    }
    ask, _ = ask_open(
        project=project,
        run_id=f"run-{tool_call_id}",
        pause_data={"toolCallId": tool_call_id, "toolName": "pay", "ask": {"question": "Pay?", "middleware": "m"}},
        **arguments,
    )
    return ask


def _decided(project: Project, url: str, tool_call_id: str, captured: Any) -> WebhookDelivery:
    """An ask decided with a webhook configured; the fast path's queue message is not run."""
    WebhookEndpoint.objects.update_or_create(project=project, defaults={"url": url, "secret": "s3cret"})
    ask = _open(project, tool_call_id)
    with captured(execute=False):
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot")
    return WebhookDelivery.objects.get(ask=ask)


# --- webhooks -----------------------------------------------------------------------------------


def test_a_delivery_that_failed_is_not_posted_again_by_a_sweep_before_it_is_due(
    project: Project, other_project: Project, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    """Backoff is bypassed. A sweep lists the due deliveries, then sends them one by one (up to
    10 s each); a delivery in that list that another pass (the next sweep, or the task's Celery
    retry) attempts and fails meanwhile is rescheduled (`next_attempt_at = now + backoff`), yet
    the first sweep's `_claim` POSTs it again at once: `_claim` re-checks neither that the delivery
    is still due nor the attempt cap. Expected: one POST of the failing delivery, the second pass
    a no-op until its backoff has passed."""
    with webhook_receiver() as server:
        server.status_for["/fails"] = 500
        first = _decided(project, url_of(server, "/ok"), "w1", django_capture_on_commit_callbacks)
        failing = _decided(other_project, url_of(server, "/fails"), "w2", django_capture_on_commit_callbacks)
        WebhookDelivery.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now() - timedelta(minutes=1))
        real_deliver = webhooks.webhook_deliver
        calls: list[int] = []

        def deliver(*, delivery_id: int) -> None:
            calls.append(delivery_id)
            if len(calls) == 1:
                # Another pass gets to the failing delivery while this sweep is still busy.
                with suppress(WebhookFailed):
                    real_deliver(delivery_id=failing.pk)
            real_deliver(delivery_id=delivery_id)

        monkeypatch.setattr(webhooks, "webhook_deliver", deliver)
        webhooks_send_due()
        posts_of_failing = [path for path, _, _ in server.received if path == "/fails"]

    failing.refresh_from_db()
    assert calls == [first.pk, failing.pk]  # the sweep did list it while it was due
    assert posts_of_failing == ["/fails"], f"posted {len(posts_of_failing)} times within the backoff"
    assert failing.attempts == 1


def test_the_webhook_task_never_attempts_a_delivery_more_than_max_attempts_times(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """Retries are not bounded by the outbox's cap. `MAX_ATTEMPTS` (12) is only a filter of the
    sweep's listing: `_claim` ignores it, so a delivery already at the cap is still POSTed, and
    the task alone retries `max_retries=12` times (13 runs), on top of the sweep's own attempts.
    Expected: at most MAX_ATTEMPTS POSTs of a delivery whose receiver always fails. (`.apply()`
    runs the task and its retries in-process, without the countdown.)"""
    with webhook_receiver(500) as server:
        delivery = _decided(project, url_of(server), "w3", django_capture_on_commit_callbacks)

        with suppress(WebhookFailed):
            tasks.ask_deliver_webhook.apply(args=[delivery.pk])
        posts = len(server.received)

    delivery.refresh_from_db()
    assert posts <= MAX_ATTEMPTS, f"{posts} POSTs for a cap of {MAX_ATTEMPTS}"
    assert delivery.attempts <= MAX_ATTEMPTS


def test_a_refused_attempt_is_a_warning_of_the_task_and_the_last_one_an_error(
    project: Project, django_capture_on_commit_callbacks: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver's 503 is an outcome the outbox retries, not a fault of the fast-path task: the
    task ends without raising (Celery logged each such attempt as an ERROR with a traceback), and
    the worker's log gets one line naming the attempt; once no attempt is left, as an error."""
    with webhook_receiver(503) as server:
        delivery = _decided(project, url_of(server), "w-log", django_capture_on_commit_callbacks)

        with caplog.at_level("WARNING", logger="ledger.asks.webhooks"):
            result = tasks.ask_deliver_webhook.apply(args=[delivery.pk])
            WebhookDelivery.objects.filter(pk=delivery.pk).update(
                attempts=MAX_ATTEMPTS - 1, next_attempt_at=timezone.now()
            )
            tasks.ask_deliver_webhook.apply(args=[delivery.pk])

    assert result.successful()
    first, last = caplog.records
    assert (first.levelname, first.exc_info) == ("WARNING", None)
    assert first.getMessage() == (
        f"webhook delivery {delivery.pk}, attempt 1 of {MAX_ATTEMPTS}: HTTP 503; "
        "the outbox tries again after its backoff"
    )
    assert (last.levelname, last.exc_info) == ("ERROR", None)
    assert last.getMessage().endswith(f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}: HTTP 503; no attempt is left")
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.FAILED, MAX_ATTEMPTS)


def test_a_delivery_waiting_for_a_webhook_turned_off_is_sent_once_it_is_set_again(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """Turning the webhook off pauses its deliveries, it does not drop them: they wait in the
    outbox untouched (no attempt used up) and go to the URL set when it is turned on again."""
    with webhook_receiver() as server:
        delivery = _decided(project, url_of(server, "/before"), "w9", django_capture_on_commit_callbacks)
        call_command("set_webhook", "--project", project.slug, "--off", stdout=io.StringIO())
        webhook_deliver(delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.PENDING, 0)

        call_command("set_webhook", "--project", project.slug, "--url", url_of(server, "/after"), stdout=io.StringIO())
        assert webhooks_send_due() == 1
        paths = [path for path, _, _ in server.received]

    assert paths == ["/after"]


def test_a_fault_in_an_attempt_is_logged_as_a_failed_attempt_and_the_sweep_carries_on(
    project: Project, other_project: Project, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    """Something other than the receiver's answer going wrong (here the payload cannot be built)
    ends that attempt as failed, named, with its lease released and its retry scheduled; the
    sweep goes on to the next delivery."""
    with webhook_receiver() as server:
        broken = _decided(project, url_of(server, "/broken"), "w10", django_capture_on_commit_callbacks)
        _decided(other_project, url_of(server, "/ok"), "w11", django_capture_on_commit_callbacks)
        WebhookDelivery.objects.filter(pk=broken.pk).update(next_attempt_at=timezone.now() - timedelta(minutes=1))
        real_decision = Ask.decision

        def decision(self: Ask) -> Any:
            if self.pk == broken.ask_id:
                raise RuntimeError("cannot build the payload")
            return real_decision(self)

        monkeypatch.setattr(Ask, "decision", decision)

        assert webhooks_send_due() == 1
        paths = [path for path, _, _ in server.received]

    assert paths == ["/ok"]
    broken.refresh_from_db()
    assert (broken.status, broken.attempts, broken.lease_until) == (WebhookDelivery.Status.FAILED, 1, None)
    assert broken.next_attempt_at > timezone.now()
    (attempt,) = WebhookAttempt.objects.filter(delivery=broken)
    assert attempt.status_code is None
    assert "RuntimeError" in attempt.error


def test_a_webhook_turned_off_gets_no_more_posts_from_the_outbox(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """`set_webhook --off` says "Decisions of <slug> are no longer delivered", yet deliveries
    already in the outbox (queued or retrying with backoff) keep being POSTed: neither the sweep
    nor `webhook_deliver` looks at `WebhookEndpoint.active`. Expected: nothing is POSTed after
    the endpoint is turned off."""
    with webhook_receiver() as server:
        _decided(project, url_of(server), "w5", django_capture_on_commit_callbacks)
        call_command("set_webhook", "--project", project.slug, "--off", stdout=io.StringIO())

        webhooks_send_due()
        posts = len(server.received)

    assert posts == 0


def test_the_outbox_sweep_survives_a_delivery_whose_endpoint_was_deleted(
    project: Project, other_project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """A project's WebhookEndpoint deleted (the admin registers it) after a decision: its pending
    delivery makes `webhook_deliver` raise RelatedObjectDoesNotExist at
    `ask.project.webhook.secret` after the attempt was claimed and logged. That is not
    WebhookFailed, so the sweep dies there: the other project's due delivery is not sent, and the
    orphan keeps its lease and an attempt stuck at "no answer recorded". Expected: the orphan is
    skipped or recorded as failed, the sweep carries on."""
    with webhook_receiver() as server:
        orphan = _decided(project, url_of(server, "/gone"), "w6", django_capture_on_commit_callbacks)
        good = _decided(other_project, url_of(server, "/ok"), "w7", django_capture_on_commit_callbacks)
        WebhookDelivery.objects.filter(pk=orphan.pk).update(next_attempt_at=timezone.now() - timedelta(minutes=1))
        WebhookEndpoint.objects.filter(project=project).delete()

        error: BaseException | None = None
        try:
            webhooks_send_due()
        except Exception as exc:
            error = exc
        paths = [path for path, _, _ in server.received]

    good.refresh_from_db()
    assert error is None, f"the sweep raised {error!r}"
    assert paths == ["/ok"]
    assert good.status == WebhookDelivery.Status.DELIVERED


def test_a_delivery_retried_after_the_url_was_changed_goes_to_the_configured_url(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """A failed attempt tells the admin which URL to configure (a redirect's Location), but a
    delivery keeps POSTing to the URL copied when it was created (`WebhookDelivery.url`) while
    signing with the endpoint's *current* secret (`set_webhook` mints a new one): the old URL gets
    bodies signed with a secret it never had, the new URL never gets the pending decision.
    Expected: the retry after the change reaches the configured URL."""
    with webhook_receiver() as server:
        server.status_for["/old"] = 308
        delivery = _decided(project, url_of(server, "/old"), "w8", django_capture_on_commit_callbacks)
        with suppress(WebhookFailed):
            webhook_deliver(delivery_id=delivery.pk)
        call_command("set_webhook", "--project", project.slug, "--url", url_of(server, "/new"), stdout=io.StringIO())
        WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())

        webhooks_send_due()
        paths = [path for path, _, _ in server.received]

    assert paths == ["/old", "/new"]
    logged = WebhookAttempt.objects.filter(delivery=delivery).order_by("id").values_list("url", flat=True)
    assert list(logged) == [url_of(server, "/old"), url_of(server, "/new")]
    delivery.refresh_from_db()
    assert delivery.url == url_of(server, "/new")


# --- deadlines ----------------------------------------------------------------------------------


def test_the_deadline_pass_carries_on_when_an_ask_is_deleted_while_it_runs(
    project: Project, other_project: Project, monkeypatch: Any
) -> None:
    """The pass reads up to 500 overdue asks, then decides them one by one; an ask deleted in
    between (its project deleted) makes `ask_decide` raise AskNotFound, which the pass does not
    catch (only AskAlreadyDecided): the task crashes and the overdue asks after it wait for the
    next pass. Expected: the deleted ask is skipped and the others are decided in this pass."""
    past = timezone.now() - timedelta(minutes=5)
    first = _open(project, "d1", deadline=past - timedelta(minutes=2))
    doomed = _open(other_project, "d2", deadline=past - timedelta(minutes=1))
    last = _open(project, "d3", deadline=past)
    real_decide = asks_service.ask_decide
    decided: list[int] = []

    def decide(**kwargs: Any) -> Ask:
        if not decided:
            Project.objects.filter(pk=other_project.pk).delete()  # meanwhile, in the admin
        decided.append(kwargs["ask_id"])
        return real_decide(**kwargs)

    monkeypatch.setattr(asks_service, "ask_decide", decide)
    applied = asks_apply_deadlines()

    assert not Ask.objects.filter(pk=doomed.pk).exists()
    last.refresh_from_db()
    first.refresh_from_db()
    assert (first.status, last.status) == (Ask.Status.DECIDED, Ask.Status.DECIDED)
    assert applied == 2


def test_a_deadline_already_past_is_not_overridden_by_a_later_decision(
    project: Project, django_user_model: Any
) -> None:
    """An ask opened with a deadline already in the past (or one whose deadline passes while
    beat is behind: it runs every 5 s, and the README says deadlines "catch up" after an outage)
    is open and decidable by anyone: `ask_open` accepts the past deadline and `ask_decide` never
    looks at it, so the outcome of a timed-out ask depends on whether a person or the beat pass
    gets there first. Expected: a past deadline is refused at open, or its `onTimeout` stands and
    a person's later decision is refused as already decided."""
    person = django_user_model.objects.create_user(username="dana")
    try:
        ask = _open(project, "d4", deadline=timezone.now() - timedelta(hours=1), on_timeout="decline")
    except AskInvalid:
        return  # refused at open: fine
    with pytest.raises(AskAlreadyDecided, match="deadline"):
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.PAGE, by_label="dana", user=person)
    ask.refresh_from_db()
    assert (ask.approved, ask.decided_via, ask.decided_by) == (False, Ask.Via.DEADLINE, None)
    assert asks_apply_deadlines() == 0  # closed already, as the pass would have


def test_a_repost_carrying_a_deadline_sets_it_on_an_ask_opened_from_events(project: Project) -> None:
    """Asks also open from ingested `pause.request` events, without a deadline. The agent's own
    `POST /asks` with `deadline`/`onTimeout` (checkpoint is optional) then answers 200 with the
    existing ask and drops the deadline: `ask_open` only adds a missing deadline inside the
    `checkpoint is not None` branch. The ask never times out. Expected: the missing deadline is
    added."""
    _open(project, "d5")  # as asks_from_events opens it: no deadline
    deadline = timezone.now() + timedelta(minutes=10)

    ask = _open(project, "d5", deadline=deadline, on_timeout="approve")

    ask.refresh_from_db()
    assert ask.deadline == deadline
    assert ask.on_timeout == Ask.OnTimeout.APPROVE


# --- integrity checks ---------------------------------------------------------------------------


def test_the_integrity_check_task_is_a_no_op_for_a_check_whose_run_was_deleted(project: Project) -> None:
    """`integrity_check` is queued on commit and may run after the run (and with it, by cascade,
    the check) was deleted; `integrity_check_run` does `IntegrityCheck.objects.get(pk=...)` and
    crashes with DoesNotExist. Expected: a deleted row is a quiet no-op."""
    run = Run.objects.create(project=project, run_id="run-gone")
    check = IntegrityCheck.objects.create(run=run, records_total=0)
    check_id = check.pk
    run.delete()

    tasks.integrity_check(check_id)  # the task body, called directly


@pytest.mark.django_db(transaction=True)
def test_an_attempt_that_outlasts_its_lease_does_not_undo_the_later_attempts_delivery(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """The timeout bounds each socket operation, so a slow receiver keeps an attempt going past
    its lease, and the sweep claims the delivery again. The second attempt is answered 200; the
    first then ends in a 500. Expected: delivered (once delivered, always), both attempts logged."""
    first_waiting, release = threading.Event(), threading.Event()
    calls: list[int] = []

    with webhook_receiver() as server:

        def slow_first_answer() -> None:
            calls.append(len(calls))
            if len(calls) == 1:
                first_waiting.set()
                release.wait(10)
                server.status = 500

        server.on_request = slow_first_answer
        delivery = _decided(project, url_of(server), "w-slow", django_capture_on_commit_callbacks)
        failed: list[BaseException] = []

        def first_attempt() -> None:
            try:
                webhook_deliver(delivery_id=delivery.pk)
            except WebhookFailed as exc:
                failed.append(exc)
            finally:
                connection.close()

        slow = threading.Thread(target=first_attempt)
        slow.start()
        assert first_waiting.wait(10)
        WebhookDelivery.objects.filter(pk=delivery.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
        webhook_deliver(delivery_id=delivery.pk)  # the sweep's claim of the expired lease: answered 200
        release.set()
        slow.join(20)

    assert failed, "the first attempt was answered 500"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.lease_until) == (WebhookDelivery.Status.DELIVERED, 2, None)
    assert delivery.delivered_at is not None
    assert sorted(WebhookAttempt.objects.filter(delivery=delivery).values_list("status_code", flat=True)) == [200, 500]


@pytest.mark.django_db(transaction=True)
def test_a_notification_sweep_skips_messages_another_sweep_holds_instead_of_waiting(
    project: Project, agent_client: ApiClient, settings: Any
) -> None:
    from ledger.asks import notifications

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    first = open_ask(agent_client, plain_body("q1", "run-q1"))["id"]
    second = open_ask(agent_client, plain_body("q2", "run-q2"))["id"]
    held = WebhookDelivery.objects.get(ask_id=first, kind=WebhookDelivery.Kind.NOTIFICATION)
    holding, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        with transaction.atomic():
            WebhookDelivery.objects.select_for_update().get(pk=held.pk)
            holding.set()
            release.wait(30)

    out: dict[str, Any] = {}
    holder = in_thread(hold_the_row, out, "holder")
    assert holding.wait(30)
    try:
        sweep = in_thread(notifications.notifications_send_due, out, "sweep")
        sweep.join(30)
        assert not sweep.is_alive(), "the sweep waited on a row another transaction holds"
        assert out["sweep"] == 1
    finally:
        release.set()
        holder.join(30)
    assert WebhookDelivery.objects.get(ask_id=second, kind="notification").status == WebhookDelivery.Status.DELIVERED
    held.refresh_from_db()
    assert (held.status, held.attempts) == (WebhookDelivery.Status.PENDING, 0)
    assert notifications.notifications_send_due() == 1
