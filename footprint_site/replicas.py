"""Reads that may lag, served by a streaming replica when DATABASE_REPLICA_URL is set.

Only pages that show the ledger (run lists, run pages, refusals, audit bundles, the overview) read
from the replica, and only the ledger's and the artifact store's tables: who a person is, their
session and their memberships are always read on the primary, so a fresh sign-in or a revoked
role takes effect at once. Writes, decisions, long-polls and the agents' API never come here.

A replica is used while its lag is under DATABASE_REPLICA_MAX_LAG seconds; each process checks it
at most every REPLICA_CHECK_SECONDS. A replica that is behind, unreachable or fails in the middle
of a page sends the page back to the primary (the page is a read, so it is simply rendered again
there), and the replica is left alone until its next check. The page says which database it was
read from and how far behind that was (`X-Footprint-Read-From`, and a line on the page).
"""

import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.http import Http404, HttpRequest, HttpResponse

logger = logging.getLogger(__name__)

REPLICA = "replica"
REPLICA_CHECK_SECONDS = 2.0
# The tables a replica may serve: the ledger's and the artifact store's, never auth or tenancy.
LAGGING_APPS = frozenset({"ledger", "artifacts"})

# Lag, in seconds, of the replica this request reads from; None while reads go to the primary.
_reading_from_replica: contextvars.ContextVar[float | None] = contextvars.ContextVar("replica_lag", default=None)


@dataclass
class _ReplicaState:
    checked_at: float = float("-inf")
    lag: float | None = None  # None: behind its bound, or unreachable


_state = _ReplicaState()

# On the replica: how far behind the primary's WAL position it has replayed. Caught up when it
# has replayed what the primary had written when asked; otherwise the age of the last replayed
# transaction, which overstates the lag after an idle spell (the safe direction).
_PRIMARY_POSITION = "SELECT pg_current_wal_lsn()::text"
_REPLICA_LAG = """
    SELECT CASE
        WHEN NOT pg_is_in_recovery() THEN NULL
        WHEN pg_last_wal_replay_lsn() >= %s::pg_lsn THEN 0
        ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 'Infinity')
    END
"""


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def max_lag_seconds() -> float:
    return float(getattr(settings, "DATABASE_REPLICA_MAX_LAG", 30))


def _measure_lag() -> float | None:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cur:
            cur.execute(_PRIMARY_POSITION)
            (position,) = cur.fetchone()
        with connections[REPLICA].cursor() as cur:
            cur.execute(_REPLICA_LAG, [position])
            row = cur.fetchone()
    except (OperationalError, InterfaceError) as exc:
        logger.warning("read replica unreachable, reading from the primary: %s", type(exc).__name__)
        _close_quietly(REPLICA)
        return None
    if row is None or row[0] is None:
        logger.warning("DATABASE_REPLICA_URL names a server that is not in recovery: reading from the primary")
        return None
    lag = float(row[0])
    if lag > max_lag_seconds():
        logger.info("read replica %.1f s behind (bound %s s): reading from the primary", lag, max_lag_seconds())
        return None
    return lag


def usable_replica_lag() -> float | None:
    """The replica's lag when it may serve reads now, else None. Measured at most every
    REPLICA_CHECK_SECONDS per process: a page's reads never wait on a check of their own."""
    if not replica_configured():
        return None
    now = time.monotonic()
    if now - _state.checked_at >= REPLICA_CHECK_SECONDS:
        _state.lag = _measure_lag()
        _state.checked_at = now
    return _state.lag


def _replica_failed() -> None:
    _state.lag = None
    _state.checked_at = time.monotonic()
    _close_quietly(REPLICA)


def _close_quietly(alias: str) -> None:
    with contextlib.suppress(OperationalError, InterfaceError):  # already broken: nothing to close politely
        connections[alias].close()


def lagging_reads_alias() -> str:
    """The database for this request's reads that may lag (raw SQL of the pages' selectors)."""
    return REPLICA if _reading_from_replica.get() is not None else DEFAULT_DB_ALIAS


def reads_that_may_lag(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page view whose ledger reads may come from the replica, with its lag shown."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        lag = usable_replica_lag() if request.method in ("GET", "HEAD") else None
        if lag is not None:
            token = _reading_from_replica.set(lag)
            try:
                response = view(request, *args, **kwargs)
                response["X-Footprint-Read-From"] = "replica"
                return response
            except Http404:
                pass  # what the replica has not replayed yet (a run just stored): the primary has it
            except (OperationalError, InterfaceError) as exc:
                # Whichever server failed, the page is a read: render it again on the primary.
                # Had the primary failed, it fails again there and the page answers 503.
                logger.warning("a page failed reading from the replica, reading from the primary: %s", exc)
                _replica_failed()
            finally:
                _reading_from_replica.reset(token)
        response = view(request, *args, **kwargs)
        response["X-Footprint-Read-From"] = "primary"
        return response

    return wrapped


class ReplicaRouter:
    """Sends the ledger's and the artifact store's reads to the replica inside `reads_that_may_lag`
    views; everything else, and every write and migration, to the primary."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        if _reading_from_replica.get() is not None and model._meta.app_label in LAGGING_APPS:  # type: ignore[attr-defined]
            return REPLICA
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model: type, **hints: Any) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # the replica holds the primary's rows: same objects, same keys

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def read_from(request: HttpRequest) -> dict[str, object]:
    """Context processor: the replica's lag for the line that says a page was read from it."""
    lag = _reading_from_replica.get()
    return {} if lag is None else {"replica_lag_seconds": lag}
