"""The hand-off between a decision and the agents waiting for it: the services wake the waiters
with a NOTIFY on this module's channel at commit; one LISTEN connection per web process wakes the
requests that long-poll for that ask.

A long-poll registers before it re-reads the database, so a decision committed between the read
and the wait is never missed; a lost listener connection wakes every waiter to re-read. NOTIFY
goes through PostgreSQL, so a decision taken on one web node wakes waiters on every other.
"""

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from footprint_site.lib.db import session_connection
from ledger.models import Ask

logger = logging.getLogger(__name__)


NOTIFY_CHANNEL = "ask_decided"


def ask_waiters_wake(ask_id: int) -> None:
    """Wake every long-poll waiting on the ask (decided or superseded), at commit (NOTIFY is
    transactional)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, str(ask_id)])


class Listener:
    def __init__(self, channel: str) -> None:
        self.channel = channel
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._params: dict[str, Any] = {}

    def _ensure_running(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._params = session_connection().get_connection_params()
            self._thread = threading.Thread(target=self._run, name=f"listen-{self.channel}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                params = dict(self._params)
                params.pop("cursor_factory", None)
                with psycopg.connect(**params, autocommit=True) as conn:
                    self._conn = conn
                    conn.execute(f'LISTEN "{self.channel}"')
                    self._wake_all()  # anything decided while (re)connecting is re-read
                    # A timeout lets the loop notice stop() without waiting for a NOTIFY.
                    while not self._stopping.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            self._wake(notice.payload)
            except Exception:  # the database went away: reconnect, and let waiters re-read meanwhile
                if self._stopping.is_set():
                    break
                logger.warning("listener for %s lost its connection; reconnecting", self.channel)
                self._wake_all()
                time.sleep(1)
            finally:
                self._conn = None

    def stop(self) -> None:
        """Close the LISTEN connection (tests drop their database afterwards)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self._stopping.clear()

    def _wake(self, key: str) -> None:
        with self._lock:
            events = list(self._waiters.get(key, ()))
        for event in events:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            events = [e for waiting in self._waiters.values() for e in waiting]
        for event in events:
            event.set()

    def register(self, key: str) -> threading.Event:
        self._ensure_running()
        event = threading.Event()
        with self._lock:
            self._waiters[key].add(event)
        return event

    def unregister(self, key: str, event: threading.Event) -> None:
        with self._lock:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[key]


ask_decisions = Listener(NOTIFY_CHANNEL)


class WaitsFull(Exception):
    """Every wait slot of this process is taken: the caller answers at once and is asked again."""


class WaitSlots:
    """The long-polls this process holds at once. Each holds a web thread for its whole wait, so
    a worker keeps one thread free for everything else, the decisions that end the waits among
    it. The limit: FOOTPRINT_ASK_WAITS_PER_PROCESS when set, else what gunicorn's `post_fork`
    gives (its threads less one), else none (runserver, tests)."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self._lock = threading.Lock()
        self._held = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        configured = settings.FOOTPRINT_ASK_WAITS_PER_PROCESS
        limit = configured if configured is not None else self.limit
        with self._lock:
            if limit is not None and self._held >= limit:
                raise WaitsFull
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1


ask_wait_slots = WaitSlots()


ASK_WAIT_MAX_SECONDS = 55


DECISION_FIELDS = (
    "status", "approved", "decided_by_label", "decided_at", "decided_via", "note", "value", "answered", "kind",
    "superseded_by",
)  # fmt: skip


def ask_wait_for_decision(*, ask: Ask, wait_seconds: float) -> Ask:
    """Return as soon as the ask is closed (decided or superseded), or when the wait ends. Woken by
    NOTIFY, not by polling. WaitsFull when this process holds all the waits it may."""
    if ask.status != Ask.Status.OPEN or wait_seconds <= 0:
        return ask
    with ask_wait_slots.held():
        return _wait(ask, wait_seconds)


def _wait(ask: Ask, wait_seconds: float) -> Ask:
    key = str(ask.pk)
    woken = ask_decisions.register(key)
    try:
        ask.refresh_from_db(fields=DECISION_FIELDS)  # registered first: a decision from here on wakes us
        deadline = time.monotonic() + min(wait_seconds, ASK_WAIT_MAX_SECONDS)
        while ask.status == Ask.Status.OPEN:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            woken.wait(remaining)
            woken.clear()
            ask.refresh_from_db(fields=DECISION_FIELDS)
    finally:
        ask_decisions.unregister(key, woken)
    return ask
