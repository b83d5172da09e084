"""At most one open ask per session (spec §9.3, as the host's ERR_AWAITING_DECISION): a session
that pauses again supersedes its earlier open ask, which nobody can decide any more and which no
agent waits on for ever."""

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test import Client

from ledger.asks.services import ask_open as service_ask_open
from ledger.models import Ask, Run, RunEvent
from tenancy.models import Project
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, b_body, decide, open_ask, plain_body, refused, secret_of

pytestmark = pytest.mark.django_db

SESSION = "support-chat-41"
DECISION_EVENT = "ledger.human_decision"


def _in_session(run_id: str, session: str | None = SESSION, **extra: Any) -> dict[str, Any]:
    body = b_body(run_id, **extra)
    if session is not None:
        body["sessionId"] = session
    return body


def _event(
    run_id: str,
    type_: str,
    payload: dict[str, Any],
    session: str | None = None,
    *,
    seq: int = 0,
    wall: int | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id, "runtimeStageId": "sf-tools/execute-tool-calls#paused"}
    if session is not None:
        meta["sessionId"] = session
    if wall is not None:
        meta["wallClockMs"] = wall
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": meta}


def _pause_event(
    run_id: str, tool_call_id: str, session: str | None, *, seq: int = 0, wall: int | None = None
) -> dict[str, Any]:
    question = {"toolCallId": tool_call_id, "toolName": "refund", "question": "Refund 40 EUR?"}
    payload = {"reason": "askHuman", "questionPayload": question}
    return _event(run_id, "pause.request", payload, session, seq=seq, wall=wall)


def _open_in(session: str) -> list[int]:
    return list(Ask.objects.filter(session_id=session, status=Ask.Status.OPEN).values_list("pk", flat=True))


def test_a_second_ask_in_the_session_supersedes_the_first(agent_client: ApiClient) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert second["status"] == "open"
    shown = agent_client.get(f"{ASKS}/{first['id']}").json()["ask"]
    assert shown["status"] == "superseded"
    assert shown["supersededBy"] == second["id"]
    assert "decision" not in shown
    assert "supersededBy" not in agent_client.get(f"{ASKS}/{second['id']}").json()["ask"]


def test_a_superseded_ask_cannot_be_decided_and_nothing_is_written(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    body = refused(decide(integration_client, first["id"], approved=True, by="slack:omar"), 409, "ERR_ASK_SUPERSEDED")

    assert body["supersededBy"] == second["id"]
    assert f"ask {second['id']}" in body["error"]
    assert SESSION in body["error"]
    ask = Ask.objects.get(pk=first["id"])
    assert (ask.status, ask.approved, ask.decided_at) == (Ask.Status.SUPERSEDED, None, None)
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()
    # The later ask is the one to decide, and deciding it works.
    assert decide(integration_client, second["id"], approved=True, by="slack:omar").status_code == 200


def test_the_decision_of_a_superseded_ask_answers_409_instead_of_open(agent_client: ApiClient) -> None:
    # "open" would send a waiting agent back to wait for a decision that can never come.
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    for wait in ("0", "5"):
        body = refused(agent_client.get(f"{ASKS}/{first['id']}/decision?wait={wait}"), 409, "ERR_ASK_SUPERSEDED")
        assert body["supersededBy"] == second["id"]


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_on_the_earlier_ask_wakes_when_the_session_pauses_again(agent_client: ApiClient) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    waiter = ApiClient(secret_of(agent_client))
    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            started = time.monotonic()
            response = waiter.get(f"{ASKS}/{first['id']}/decision?wait=10")
            outcome["elapsed"] = time.monotonic() - started
            outcome["status"], outcome["body"] = response.status_code, response.json()
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))
    thread.join(20)

    assert not thread.is_alive()
    assert outcome["status"] == 409, outcome
    assert outcome["body"]["code"] == "ERR_ASK_SUPERSEDED"
    assert outcome["body"]["supersededBy"] == second["id"]
    assert outcome["elapsed"] < 9.5  # woken by the later ask, not by the end of the wait


def test_asks_of_other_sessions_without_one_or_of_other_projects_stay_open(
    agent_client: ApiClient, other_agent_client: ApiClient
) -> None:
    no_session = open_ask(agent_client, _in_session("run-1796043009968-3", session=None))
    other_session = open_ask(agent_client, _in_session("run-1796043009968-5", session="support-chat-42"))
    other_project = open_ask(other_agent_client, _in_session("run-1796043009968-6"))
    open_ask(agent_client, _in_session("run-1796043011000-4"))
    open_ask(agent_client, _in_session("run-1796043011000-7", session=None))

    assert set(Ask.objects.filter(pk__in=[no_session["id"], other_session["id"], other_project["id"]]).values_list(
        "status", flat=True
    )) == {Ask.Status.OPEN}  # fmt: skip


def test_a_decided_ask_stays_decided_when_its_session_pauses_again(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    decided = decide(integration_client, first["id"], approved=True, by="dana").json()["decision"]
    open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert agent_client.get(f"{ASKS}/{first['id']}/decision").json() == {"status": "decided", "decision": decided}


def test_re_posting_a_superseded_ask_neither_reopens_it_nor_supersedes_the_later_one(agent_client: ApiClient) -> None:
    first_body = _in_session("run-1796043009968-3")
    first = open_ask(agent_client, first_body)
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    again = open_ask(agent_client, first_body, status=200)

    assert (again["id"], again["status"], again["supersededBy"]) == (first["id"], "superseded", second["id"])
    assert Ask.objects.get(pk=second["id"]).status == Ask.Status.OPEN


def test_asks_opened_from_pause_events_follow_the_same_rule(agent_client: ApiClient) -> None:
    assert agent_client.ingest([_pause_event("run-a", "q1", SESSION)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-b", "q1", SESSION)]).status_code == 200

    statuses = dict(Ask.objects.values_list("run_id", "status"))
    assert statuses == {"run-a": Ask.Status.SUPERSEDED, "run-b": Ask.Status.OPEN}
    assert Ask.objects.get(run_id="run-a").superseded_by == Ask.objects.get(run_id="run-b")


def test_an_ask_that_learns_its_session_from_its_events_supersedes_the_sessions_earlier_ask(
    agent_client: ApiClient,
) -> None:
    # The agent posts the later pause without a session; its pause event, ingested after, names it.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))
    later = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-b"))
    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.OPEN

    assert agent_client.ingest([_pause_event("run-b", "q1", SESSION)]).status_code == 200

    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.SUPERSEDED
    assert Ask.objects.get(pk=later["id"]).status == Ask.Status.OPEN


def test_the_page_of_a_superseded_ask_links_the_later_one_and_offers_no_decision(
    agent_client: ApiClient, approver_client: Client
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    page = approver_client.get(f"/asks/{first['id']}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'href="/asks/{second["id"]}/"' in html
    assert "Superseded" in html
    assert 'name="decision"' not in html

    late = approver_client.post(f"/asks/{first['id']}/decide/", {"decision": "approve"})
    assert late.status_code == 409
    assert "Superseded" in late.content.decode()
    assert Ask.objects.get(pk=first["id"]).status == Ask.Status.SUPERSEDED

    inbox = approver_client.get("/inbox/").content.decode()
    assert f'href="/asks/{second["id"]}/"' in inbox
    assert f'href="/asks/{first["id"]}/"' not in inbox


def test_a_refused_decision_on_a_superseded_ask_creates_no_run(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    # The run's lock (INSERT … ON CONFLICT) would leave an empty "running" run behind the 409 for a
    # run that never sent an event: the superseded ask is refused before it.
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    open_ask(agent_client, _in_session("run-1796043011000-4"))
    assert not Run.objects.filter(run_id=first["runId"]).exists()

    refused(decide(integration_client, first["id"], approved=True, by="slack:omar"), 409, "ERR_ASK_SUPERSEDED")

    assert not Run.objects.filter(run_id=first["runId"]).exists(), list(
        Run.objects.filter(run_id=first["runId"]).values("status", "event_count")
    )


def test_an_earlier_ask_that_learns_its_session_after_a_later_ask_opened_is_superseded_by_it(
    agent_client: ApiClient,
) -> None:
    earlier = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-a"))
    later = open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert agent_client.ingest([_pause_event("run-a", "q1", SESSION)]).status_code == 200

    superseded = Ask.objects.get(pk=earlier["id"])
    assert (superseded.session_id, superseded.status, superseded.superseded_by_id) == (
        SESSION, Ask.Status.SUPERSEDED, later["id"]
    )  # fmt: skip
    assert _open_in(SESSION) == [later["id"]]


def _open_from_a_thread(project: Project, run_id: str, tool_call_id: str, hold: threading.Event) -> threading.Thread:
    """Open an ask in SESSION and keep its transaction open until `hold` is set."""
    opened = threading.Event()

    def open_and_hold() -> None:
        try:
            with transaction.atomic():
                service_ask_open(
                    project=Project.objects.get(pk=project.pk), key=None, run_id=run_id, session_id=SESSION,
                    pause_data={"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"},
                    checkpoint=None, deadline=None, on_timeout="decline",
                )  # fmt: skip
                opened.set()
                hold.wait(10)
        finally:
            opened.set()
            connections.close_all()

    thread = threading.Thread(target=open_and_hold)
    thread.start()
    assert opened.wait(10)
    return thread


@pytest.mark.django_db(transaction=True)
def test_two_asks_opened_at_once_in_one_session_leave_one_open(project: Project) -> None:
    # The second opener waits on the session's lock until the first commits, then sees its ask.
    release = threading.Event()
    first = _open_from_a_thread(project, "run-a", "q1", release)
    second = threading.Thread(
        target=lambda: (
            service_ask_open(
                project=project, key=None, run_id="run-b", session_id=SESSION,
                pause_data={"toolCallId": "q2", "toolName": "ask_user", "question": "City?"},
                checkpoint=None, deadline=None, on_timeout="decline",
            ),
            connections.close_all(),
        )
    )  # fmt: skip
    second.start()
    time.sleep(0.3)  # the second opener is now waiting on the lock
    assert second.is_alive()
    release.set()
    first.join(20)
    second.join(20)

    assert Ask.objects.filter(session_id=SESSION).count() == 2
    assert _open_in(SESSION) == [Ask.objects.get(run_id="run-b").pk]


def test_re_posting_an_event_opened_ask_with_its_session_records_it_and_supersedes(agent_client: ApiClient) -> None:
    # The observer's pause event (no sessionId, a run without one) opens run-b's ask after the
    # session's earlier one; the agent's own POST then names the session.
    assert agent_client.ingest([_pause_event("run-a", "q0", SESSION)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-b", "q1", None)]).status_code == 200

    again = open_ask(agent_client, {**plain_body(tool_call_id="q1", run_id="run-b"), "sessionId": SESSION}, status=200)

    assert again.get("sessionId") == SESSION, again
    assert Ask.objects.get(run_id="run-a").status == Ask.Status.SUPERSEDED


def test_an_ask_posted_without_a_session_takes_its_runs_session(agent_client: ApiClient) -> None:
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))
    assert agent_client.ingest([_event("run-b", "agent.turn_start", {"turnIndex": 0}, SESSION)]).status_code == 200

    later = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-b"))

    assert later.get("sessionId") == SESSION, later
    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.SUPERSEDED


def test_a_decision_the_resumed_run_reports_decides_its_ask_even_once_superseded(agent_client: ApiClient) -> None:
    # The earlier pause was answered elsewhere; the resumed run pauses again and the agent posts
    # that ask at once, before its buffered events (checkin.decision among them) are flushed. The
    # run's report is evidence; the supersede was only derived.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))  # tool call t3
    open_ask(agent_client, {**plain_body(tool_call_id="q9", run_id="run-z"), "sessionId": SESSION})
    reported = {"toolName": "transfer_funds", "toolCallId": "t3", "iteration": 1, "approved": True, "by": "alice@ops"}

    assert agent_client.ingest([_event("run-z", "checkin.decision", reported)]).status_code == 200

    ask = Ask.objects.get(pk=earlier["id"])
    assert (ask.status, ask.decided_via, ask.approved) == (Ask.Status.DECIDED, Ask.Via.RUN, True)
    assert ask.superseded_by is None
    answer = agent_client.get(f"{ASKS}/{earlier['id']}/decision")
    assert answer.status_code == 200, answer.content


T0 = 1796040000000  # the agent's clock, in its events' meta.wallClockMs


def _checkin_decision(run_id: str, tool_call_id: str, *, wall: int) -> dict[str, Any]:
    reported = {"toolName": "refund", "toolCallId": tool_call_id, "iteration": 1, "approved": True, "by": "alice@host"}
    return _event(run_id, "checkin.decision", reported, wall=wall)


def test_an_earlier_pause_whose_events_arrive_last_does_not_supersede_the_live_ask(agent_client: ApiClient) -> None:
    # run-a paused at c1 (t0); the host answered it and resumed as run-b, which paused at c2 (t0 +
    # 3 s) and POSTed c2's ask at once. run-b's events come next, run-a's buffered ones last. By
    # arrival c1's ask is the latest; by the agent's clock, in both pause events, c2's is.
    live = open_ask(agent_client, plain_body(tool_call_id="c2", run_id="run-b") | {"sessionId": SESSION})
    resumed = [
        _checkin_decision("run-b", "c1", wall=T0 + 2000),
        _pause_event("run-b", "c2", SESSION, seq=1, wall=T0 + 3000),
    ]
    assert agent_client.ingest(resumed).status_code == 200
    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=T0)]).status_code == 200

    stale = Ask.objects.get(run_id="run-a")
    assert (stale.status, stale.superseded_by_id) == (Ask.Status.SUPERSEDED, live["id"])
    assert _open_in(SESSION) == [live["id"]]


def test_a_posted_ask_supersedes_no_pause_that_arrives_after_it_until_its_own_event_says_which_came_first(
    agent_client: ApiClient,
) -> None:
    # c2 is POSTed; a pause event of the session (c1) arrives before c2's own event. Which paused
    # first is unknown: both stay open, nothing is superseded on a guess. c2's event then orders them.
    posted = open_ask(agent_client, plain_body(tool_call_id="c2", run_id="run-b") | {"sessionId": SESSION})
    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=T0)]).status_code == 200
    assert sorted(_open_in(SESSION)) == sorted([posted["id"], Ask.objects.get(run_id="run-a").pk])

    assert agent_client.ingest([_pause_event("run-b", "c2", SESSION, wall=T0 + 3000)]).status_code == 200

    assert _open_in(SESSION) == [posted["id"]]
    assert Ask.objects.get(run_id="run-a").superseded_by_id == posted["id"]


def test_a_pause_posted_after_another_ask_arrived_supersedes_it(agent_client: ApiClient) -> None:
    # The usual order: an ask opened (from events or a POST), then the session pauses again and
    # the agent POSTs the new ask at once, before its events: later by arrival.
    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=T0)]).status_code == 200
    later = open_ask(agent_client, plain_body(tool_call_id="c2", run_id="run-b") | {"sessionId": SESSION})

    assert _open_in(SESSION) == [later["id"]]
    assert Ask.objects.get(run_id="run-a").paused_at_ms == T0


def test_a_posted_ask_whose_pause_turns_out_earlier_gives_the_session_back_its_latest_ask(
    agent_client: ApiClient,
) -> None:
    # run-a paused at c1 (t0); its POST of c1 failed (a 503, say) and is retried. Meanwhile c1 was
    # answered in the host, which resumed as run-b, paused at c2 (t0 + 3 s), and run-b's events
    # arrived. The retried POST is later by arrival, so it supersedes c2's ask; then run-a's own
    # pause event says c1 paused first: c1's ask is superseded by c2's, which is open again.
    assert agent_client.ingest([_pause_event("run-b", "c2", SESSION, wall=T0 + 3000)]).status_code == 200
    open_ask(agent_client, plain_body(tool_call_id="c1", run_id="run-a") | {"sessionId": SESSION})
    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=T0)]).status_code == 200

    assert dict(Ask.objects.filter(session_id=SESSION).values_list("run_id", "status")) == {
        "run-a": Ask.Status.SUPERSEDED,
        "run-b": Ask.Status.OPEN,
    }


def test_superseded_by_names_the_sessions_live_ask_not_another_superseded_one(agent_client: ApiClient) -> None:
    # x is POSTed (its events wait in the observer's buffer); the pause events of y (t0 + 3 s) and z
    # (t0 + 2 s) arrive: z is superseded by y; x waits for its own event, which then says x paused
    # first (t0). x is superseded: its supersededBy is the ask to follow, the session's live one (y).
    x = open_ask(agent_client, plain_body(tool_call_id="c0", run_id="run-x") | {"sessionId": SESSION})
    assert agent_client.ingest([_pause_event("run-y", "c2", SESSION, wall=T0 + 3000)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-z", "c1", SESSION, wall=T0 + 2000)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-x", "c0", SESSION, wall=T0)]).status_code == 200
    y, z = Ask.objects.get(run_id="run-y"), Ask.objects.get(run_id="run-z")
    assert (y.status, z.status, z.superseded_by_id) == (Ask.Status.OPEN, Ask.Status.SUPERSEDED, y.pk)

    body = refused(agent_client.get(f"{ASKS}/{x['id']}/decision"), 409, "ERR_ASK_SUPERSEDED")
    assert body["supersededBy"] == y.pk


def test_a_pause_event_without_a_clock_is_ordered_by_arrival(agent_client: ApiClient) -> None:
    # meta.wallClockMs is optional (ledger.schemas): the first pause of the session has none, the
    # session then pauses again with one. No clock will ever order the two: arrival does.
    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=None)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-b", "c2", SESSION, wall=T0 + 3000)]).status_code == 200

    assert dict(Ask.objects.filter(session_id=SESSION).values_list("run_id", "status")) == {
        "run-a": Ask.Status.SUPERSEDED,
        "run-b": Ask.Status.OPEN,
    }


def test_an_event_opened_ask_whose_own_post_comes_after_a_posted_ask_supersedes_that_ask(
    agent_client: ApiClient,
) -> None:
    # x is POSTed at its pause (its events still in the observer's buffer). The session pauses
    # again at y: y's pause event happens to arrive before y's POST, then y's POST arrives. Both
    # POSTs were made the moment their run paused (the premise `_later` orders POSTs by), so y
    # paused after x: y's own POST orders the two exactly as if it had come before y's event.
    x = open_ask(agent_client, plain_body(tool_call_id="c1", run_id="run-x") | {"sessionId": SESSION})
    assert agent_client.ingest([_pause_event("run-y", "c2", SESSION, wall=T0 + 3000)]).status_code == 200
    y = open_ask(agent_client, plain_body(tool_call_id="c2", run_id="run-y") | {"sessionId": SESSION}, status=200)

    assert _open_in(SESSION) == [y["id"]]
    assert y["status"] == "open"
    assert Ask.objects.get(pk=x["id"]).superseded_by_id == y["id"]


def test_a_late_pause_that_is_earlier_by_the_clock_does_not_take_over_the_session(agent_client: ApiClient) -> None:
    # c2 paused at t0 + 3 s (its event arrives first), then c3's pause event arrives with no clock
    # (meta.wallClockMs is optional): c3 is the live ask, by arrival. Last, run-a's buffered pause
    # c1 arrives, at t0 by the agent's clock: earlier than c2, which arrived before c3. Clock and
    # arrivals go round in a circle (c2 after c1 by the clock, c3 after c2 and c1 after c3 by
    # arrival): the last to arrive of the asks no clock puts earlier (c3) keeps the session, not
    # c1, which the agent's own clock proves is not the latest.
    assert agent_client.ingest([_pause_event("run-b", "c2", SESSION, wall=T0 + 3000)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-c", "c3", SESSION, wall=None)]).status_code == 200
    live = Ask.objects.get(run_id="run-c")
    assert _open_in(SESSION) == [live.pk]

    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=T0)]).status_code == 200

    late = Ask.objects.get(run_id="run-a")
    assert late.status == Ask.Status.SUPERSEDED
    assert _open_in(SESSION) == [live.pk]


def _xmins(session: str) -> dict[int, str]:
    with connection.cursor() as cur:
        cur.execute("SELECT id, xmin::text FROM ledger_ask WHERE session_id = %s", [session])
        return dict(cur.fetchall())


def test_a_pause_rewrites_only_the_ask_it_closes_not_every_superseded_ask_of_the_session(project: Project) -> None:
    # Superseding runs on every pause: it writes the ask it closes, not every earlier ask of a long
    # chat (re-pointing them all at the new live ask was O(n) writes per pause, O(n^2) per chat).
    for index in range(300):
        service_ask_open(
            project=project, key=None, run_id=f"run-{index}", session_id=SESSION,
            pause_data={"toolCallId": "c1", "toolName": "ask_user", "question": "Region?"},
            checkpoint=None, deadline=None, on_timeout="decline",
        )  # fmt: skip
    before = _xmins(SESSION)

    service_ask_open(
        project=project, key=None, run_id="run-next", session_id=SESSION,
        pause_data={"toolCallId": "c1", "toolName": "ask_user", "question": "Region?"},
        checkpoint=None, deadline=None, on_timeout="decline",
    )  # fmt: skip

    after = _xmins(SESSION)
    rewritten = [pk for pk, xmin in before.items() if after[pk] != xmin]
    assert len(rewritten) <= 1, f"one pause rewrote {len(rewritten)} earlier asks of the session"


def test_a_posted_ask_carrying_its_pause_time_is_ordered_by_the_clock_at_once(agent_client: ApiClient) -> None:
    # The clients send pausedAtMs (the agent's clock at the pause): a retried POST of an earlier
    # pause that arrives after the session's later pause event supersedes nothing, even for a moment.
    assert agent_client.ingest([_pause_event("run-b", "c2", SESSION, wall=T0 + 3000)]).status_code == 200
    live = Ask.objects.get(run_id="run-b")

    late = open_ask(
        agent_client, plain_body(tool_call_id="c1", run_id="run-a") | {"sessionId": SESSION, "pausedAtMs": T0}
    )

    assert (late["status"], late["supersededBy"]) == ("superseded", live.pk)
    assert _open_in(SESSION) == [live.pk]


@pytest.mark.parametrize(
    ("field", "value"),
    [("pausedAtMs", "a moment ago"), ("pausedAtMs", -1), ("pausedAtMs", True), ("sessionId", 41), ("sessionId", "")],
)
def test_a_pause_time_or_session_that_is_not_one_is_refused_and_nothing_is_written(
    agent_client: ApiClient, field: str, value: Any
) -> None:
    answer = agent_client.post_json(ASKS, plain_body(tool_call_id="c1", run_id="run-a") | {field: value})

    body = refused(answer, 422, "ERR_INVALID_ASK")
    assert field in body["error"], body
    assert not Ask.objects.exists()


def test_a_pause_time_far_ahead_of_the_servers_clock_orders_nothing(agent_client: ApiClient) -> None:
    # One agent's clock years ahead would keep its ask the session's latest for ever, superseding
    # every real pause the moment it opens. Its POST still opens the ask (an agent with a fast
    # clock is not shut out), and its pause event is kept as sent: both ordered by arrival.
    far = int(time.time() * 1000) + 10 * 365 * 24 * 3600 * 1000
    fast = open_ask(agent_client, plain_body(tool_call_id="c0", run_id="run-x") | {"pausedAtMs": far})
    assert Ask.objects.get(pk=fast["id"]).paused_at_ms is None

    assert agent_client.ingest([_pause_event("run-a", "c1", SESSION, wall=far)]).status_code == 200
    now = int(time.time() * 1000)
    later = open_ask(
        agent_client, plain_body(tool_call_id="c2", run_id="run-b") | {"sessionId": SESSION, "pausedAtMs": now}
    )

    assert later["status"] == "open"
    assert Ask.objects.get(run_id="run-a").status == Ask.Status.SUPERSEDED
    assert Ask.objects.get(run_id="run-a").paused_at_ms is None
