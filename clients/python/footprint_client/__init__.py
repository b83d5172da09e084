"""A small, typed client for the footprint ledger server (events, artifacts, asks).

Standard library only (``urllib.request`` + ``json``) so an agent can install or vendor it
anywhere without pulling a dependency tree next to its own.

Retries. Every call is retried with exponential backoff plus jitter on connection errors, on 5xx
answers and on 429 (too many requests) and 408 (request timeout), because every call it retries
is safe to repeat:

- ingestion is idempotent per ``(runId, seq)``: a batch whose answer was lost is stored once and
  the re-send counts the events as ``duplicates``;
- opening an ask is idempotent per ``(runId, toolCallId)``;
- artifact reads, lists, deletes (204 always) and ``resolve`` change nothing on a second go.

A ``Retry-After`` header (seconds or an HTTP date) on any retried answer is honoured: the wait is
the longer of it (capped at 60 s) and the backoff.

The one exception is the artifact **put**: every put mints a fresh ref, so a put whose answer was
lost and that is sent again stores a second artifact. Puts are therefore retried only when the
request provably did nothing: the connection was *refused* (it never reached the server), or the
server answered 429 ``ERR_RATE_LIMITED`` (its throttle refuses before the key is even checked).
Any other failure is raised.

Every other 4xx is final and never retried: it raises :class:`FootprintError` carrying the
server's ``code``. A 5xx, 408 or 429 that outlasts the retries raises :class:`FootprintError` too;
a connection error that outlasts them is re-raised as the ``OSError`` urllib gave
(``urllib.error.URLError``, ``ConnectionResetError``, ``TimeoutError`` …).
"""

from __future__ import annotations

import base64
import builtins
import email.utils
import enum
import http.client
import json
import math
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "ArtifactStore",
    "Client",
    "EventSender",
    "FootprintError",
    "Receipt",
]
__version__ = "0.1.0"

API = "/api/v1"
NOT_FOUND = "ERR_ARTIFACT_NOT_FOUND"
RATE_LIMITED = "ERR_RATE_LIMITED"
# A digest mismatch is a fact about stored bytes, not a passing fault: retrying cannot heal it.
NOT_RETRIED_5XX_CODES = frozenset({"ERR_ARTIFACT_INTEGRITY"})
# The 4xx answers that mean "not now" rather than "not this request": retried like a 5xx.
RETRIED_4XX_STATUSES = frozenset({408, 429})
ASK_WAIT_MAX_SECONDS = 55.0  # the server holds a decision long-poll at most this long
RETRY_AFTER_MAX_SECONDS = 60.0
MAX_EVENTS_PER_REQUEST = 5_000  # the server's default FOOTPRINT_MAX_EVENTS_PER_REQUEST
DEFAULT_MAX_BATCH_BYTES = 8 * 1024 * 1024 - 64 * 1024  # the server's default 8 MiB, less headroom
# The ref grammar (artifacts spec §2.2): only it recognises a ref. A string that does not match is
# absent without asking, and never reaches a URL path, where "capabilities" or "a/b" would hit
# another route.
REF_PATTERN = re.compile(r"art_[A-Za-z0-9]{22}")

Shape = Literal["text", "json", "binary"]
JsonObject = dict[str, Any]


class FootprintError(Exception):
    """An HTTP answer the call cannot succeed with: every 4xx, and a 5xx that outlasted the retries.

    ``code`` is the server's machine-readable ``ERR_…`` code (None when the body was not the
    server's JSON error, e.g. a proxy's page); branch on it, never on ``message``.
    """

    def __init__(self, status: int, code: str | None, message: str, body: Any) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        super().__init__(f"HTTP {status} {code or '-'}: {message}")


@dataclass(frozen=True, slots=True)
class Receipt:
    """The server's receipt for one run of one posted batch (sent only after COMMIT).

    ``gaps`` are the seq ranges ``(from, to)`` never received; a receipt with gaps after the
    final flush means events of the run were lost before they reached this sender.
    """

    run_id: str
    accepted: int
    duplicates: int
    last_seq: int | None
    head: str | None
    gaps: tuple[tuple[int, int], ...]
    gaps_truncated: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Receipt:
        return cls(
            run_id=data["runId"],
            accepted=int(data["accepted"]),
            duplicates=int(data["duplicates"]),
            last_seq=data.get("lastSeq"),
            head=data.get("head"),
            gaps=tuple((int(a), int(b)) for a, b in data.get("gaps") or ()),
            gaps_truncated=bool(data.get("gapsTruncated", False)),
        )


class _Retry(enum.Enum):
    SAFE = "safe"  # connection errors, 5xx, 408 and 429: the call is idempotent or a read
    REFUSED_ONLY = "refused-only"  # only when the request provably did nothing (see the module doc)


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


# A surrogate pair held as two code points, or a lone surrogate (in strings only: json.dumps
# writes nothing else outside ASCII).
_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def _well_formed(match: re.Match[str]) -> str:
    found = match.group()
    if len(found) == 2:
        high, low = map(ord, found)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    return f"\\u{ord(found):04x}"


def _dumps(value: Any) -> str:
    """Compact JSON that always encodes as UTF-8, as JavaScript's JSON.stringify writes it.

    Non-ASCII is kept as is; a lone surrogate (which ``json.loads`` gives for ``"\\ud800"``, and
    the server keeps in JSON payloads) is written as that lowercase ``\\uXXXX`` escape, and a
    surrogate pair held as two code points as the one character it encodes, so a value read from
    the server can be written back byte for byte. NaN and Infinity are refused here rather than
    sent as tokens no JSON parser must accept.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text if text.isascii() else _SURROGATES.sub(_well_formed, text)


def _error_from(status: int, raw: bytes, reason: str) -> FootprintError:
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", errors="replace")
    code = message = None
    if isinstance(body, dict):
        code = body.get("code") if isinstance(body.get("code"), str) else None
        message = body.get("error") if isinstance(body.get("error"), str) else None
    return FootprintError(status, code, message or reason or f"HTTP {status}", body)


def _retry_after(headers: Any) -> float:
    """Seconds the answer asks us to wait (delta-seconds or an HTTP date), 0 to 60; 0 if none."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):  # unreadable: our own backoff decides
            return 0.0
    return 0.0 if math.isnan(seconds) else min(max(seconds, 0.0), RETRY_AFTER_MAX_SECONDS)


class Client:
    """One ledger server, one agent key (``Authorization: Bearer <key>``).

    Thread-safe: it holds only configuration, and every request opens its own connection.

    ``timeout`` is per request (seconds); ``retries`` is how many times a failed call is tried
    *again* (``retries=5`` means at most 6 attempts); the n-th retry waits about
    ``backoff * 2**n`` seconds (capped at ``max_backoff``), drawn between half and all of it so
    that many agents restarted together do not hammer a recovering server in lockstep.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = 30,
        retries: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        # urllib would also open file:// and ftp:// URLs; a ledger is only ever spoken to over HTTP.
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("retries and backoff must be >= 0 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._key = key
        self._opener = urllib.request.build_opener(_RefuseRedirects())

    def __repr__(self) -> str:  # never print the key
        return f"Client({self.base_url!r})"

    # --- transport --------------------------------------------------------------------------------

    def _sleep_before_retry(self, attempt: int, retry_after: float = 0.0) -> None:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        time.sleep(max(random.uniform(delay / 2, delay), retry_after))

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        retry: _Retry = _Retry.SAFE,
        timeout: float | None = None,
    ) -> _Response:
        url = self.base_url + path
        if query:
            pairs = {k: v for k, v in query.items() if v is not None}
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        all_headers = {
            "Authorization": f"Bearer {self._key}",
            "Accept": "application/json",
            "User-Agent": f"footprint-client/{__version__}",
            **(headers or {}),
        }
        if body is not None:
            all_headers.setdefault("Content-Type", "application/json")
        attempt = 0
        while True:
            # The scheme was checked in __init__: only http(s) URLs are ever opened.
            request = urllib.request.Request(url, data=body, headers=all_headers, method=method)  # noqa: S310
            try:
                with self._opener.open(request, timeout=timeout or self.timeout) as answer:
                    return _Response(answer.status, answer.read())
            except urllib.error.HTTPError as failure:
                try:
                    raw = failure.read()
                except (OSError, http.client.HTTPException):  # the error page itself was cut off
                    raw = b""
                finally:
                    failure.close()
                error = _error_from(failure.code, raw, str(failure.reason))
                if 300 <= failure.code < 400:
                    where = failure.headers.get("Location", "elsewhere")
                    error = FootprintError(
                        failure.code,
                        None,
                        f"the server redirected {method} {path} to {where}: the client follows no redirect "
                        "(it would send its key there); use the final URL as base_url",
                        error.body,
                    )
                if not _retryable(error, retry) or attempt >= self.retries:
                    raise error from None
                self._sleep_before_retry(attempt, _retry_after(failure.headers))
            except (OSError, http.client.HTTPException) as failure:
                # URLError wraps failures while connecting/sending; failures while reading the
                # answer (reset, timeout, a half-written status line) arrive unwrapped.
                reason = failure.reason if isinstance(failure, urllib.error.URLError) else failure
                refused = isinstance(reason, ConnectionRefusedError)
                if (retry is _Retry.REFUSED_ONLY and not refused) or attempt >= self.retries:
                    raise
                self._sleep_before_retry(attempt)
            attempt += 1

    def _json(self, method: str, path: str, document: Any = None, **options: Any) -> Any:
        body = _dumps(document).encode("utf-8") if document is not None else None
        return self._request(method, path, body=body, **options).json()

    # --- runs --------------------------------------------------------------------------------------

    def post_events(self, events: Sequence[Mapping[str, Any]]) -> list[Receipt]:
        """Post one batch as is (each event already carries its ``seq``); one receipt per run.

        Prefer :class:`EventSender`, which numbers, batches and keeps within the server's limits.
        """
        return self._post_event_bodies([_dumps(e).encode("utf-8") for e in events])

    def _post_event_bodies(self, encoded: Sequence[bytes]) -> list[Receipt]:
        body = b'{"events":[' + b",".join(encoded) + b"]}"
        answer = self._request("POST", f"{API}/events", body=body).json()
        return [Receipt.from_json(r) for r in answer["runs"]]

    def run(self, run_id: str) -> JsonObject:
        """The run as the server summarises it (status, events, lastSeq, head, hasGaps …)."""
        result: JsonObject = self._json("GET", f"{API}/runs/{_segment(run_id)}")
        return result

    # --- artifacts ---------------------------------------------------------------------------------

    def artifacts(self, scope: Mapping[str, str]) -> ArtifactStore:
        """The project's artifact store seen from one scope ``{tenant?, principal?, conversationId}``."""
        return ArtifactStore(self, scope)

    # --- asks --------------------------------------------------------------------------------------

    def open_ask(
        self,
        run_id: str,
        pause_data: Mapping[str, Any],
        *,
        checkpoint: Any = None,
        deadline: datetime | str | None = None,
        on_timeout: Literal["decline", "approve"] = "decline",
        session_id: str | None = None,
        paused_at_ms: int | None = None,
    ) -> JsonObject:
        """Open the ask of a paused tool call and return it (``{"id", "status", …}``).

        Safe to repeat: a second post for the same ``(run_id, pause_data["toolCallId"])`` answers
        with the ask already open. The checkpoint is stored verbatim and given back only to this
        key; ``deadline`` must carry a time zone (``on_timeout`` applies once it passes).
        ``paused_at_ms`` (default: now, in Unix milliseconds; call this as the run pauses) orders
        the session's asks by the clock of the run's events.
        """
        paused_at = int(time.time() * 1000) if paused_at_ms is None else paused_at_ms
        document: JsonObject = {
            "runId": run_id,
            "pauseData": dict(pause_data),
            "onTimeout": on_timeout,
            "pausedAtMs": paused_at,
        }
        if checkpoint is not None:
            document["checkpoint"] = checkpoint
        if deadline is not None:
            if isinstance(deadline, datetime):
                if deadline.tzinfo is None:
                    raise ValueError("deadline must be timezone-aware (the server refuses naive times)")
                deadline = deadline.isoformat()
            document["deadline"] = deadline
        if session_id is not None:
            document["sessionId"] = session_id
        ask: JsonObject = self._json("POST", f"{API}/asks", document)["ask"]
        return ask

    def get_ask(self, ask_id: int) -> JsonObject:
        """The ask (with its checkpoint when this key posted it)."""
        ask: JsonObject = self._json("GET", f"{API}/asks/{int(ask_id)}")["ask"]
        return ask

    def wait_for_decision(self, ask_id: int, timeout: float | None = None) -> JsonObject:
        """Block until a person decides, and return the decision (``{approved, by, at, note?, …}``).

        Long-polls (``?wait=55``; the server answers the moment the decision commits, it does not
        sleep-loop) again and again, so an agent needs no polling interval of its own. With
        ``timeout`` (seconds) it gives up with ``TimeoutError`` once that much time has passed;
        ``timeout=0`` checks once without waiting. Raises ``FootprintError`` (409,
        ``ERR_ASK_SUPERSEDED``, ``body["supersededBy"]``) once the ask's session paused again:
        no run waits on that ask (it opens again only if a late pause event shows it was the
        session's latest after all).
        """
        give_up = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            wait = ASK_WAIT_MAX_SECONDS
            if give_up is not None:
                wait = min(wait, max(0.0, give_up - time.monotonic()))
            answer = self._json(
                "GET",
                f"{API}/asks/{int(ask_id)}/decision",
                query={"wait": format(round(wait, 3), "g")},
                timeout=wait + self.timeout,  # the server holds the request up to `wait` seconds
            )
            if answer.get("status") == "decided":
                decision: JsonObject = answer["decision"]
                return decision
            if give_up is not None and time.monotonic() >= give_up:
                raise TimeoutError(f"ask {ask_id} was not decided within {timeout} s")
            # The server had no thread to hold this wait on: it says when to ask again.
            pause = _retry_after_ms(answer) / 1000
            if pause:
                time.sleep(pause if give_up is None else min(pause, max(0.0, give_up - time.monotonic())))


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the error it is, never followed: urllib would hand the key (and
    AF-Scope) to whichever host the Location names, and turn a POST into a GET without its body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _retry_after_ms(answer: JsonObject) -> float:
    """A still-open answer's `retryAfterMs`, 0 to 60,000; 0 when it has none."""
    value = answer.get("retryAfterMs")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(min(max(value, 0), 60_000))


def _retryable(error: FootprintError, retry: _Retry) -> bool:
    if retry is _Retry.REFUSED_ONLY:
        # The server's throttle answers before the key is checked: nothing was done.
        return error.status == 429 and error.code == RATE_LIMITED
    if error.status >= 500:
        return error.code not in NOT_RETRIED_5XX_CODES
    return error.status in RETRIED_4XX_STATUSES


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _is_ref(value: object) -> bool:
    """Only the grammar recognises a ref (fullmatch: ``$`` would accept a trailing newline)."""
    return isinstance(value, str) and REF_PATTERN.fullmatch(value) is not None


class EventSender:
    """Numbers, buffers and posts an agent's events.

    ``seq`` is the 0-based number of the event within its ``meta.runId``, counted by this sender
    in the order events are given to :meth:`send` (any ``seq`` already on an event is replaced).
    The server identifies an event by ``(runId, seq)``, which is what makes a re-sent batch
    harmless: keep one sender per run stream for its whole life, since a fresh sender counts
    from 0 again and an event with a reused seq but other content is refused (409).

    Events are posted in batches of at most ``batch_size`` events (capped at the server's 5,000)
    and ``max_batch_bytes`` bytes (the server refuses more than 5,000 events or 8 MiB per request
    with 413). A batch is stored whole or not at all. Receipts of every posted batch accumulate in
    ``receipts``. Thread-safe: one lock serialises numbering and posting.

    When a post fails, what happens to its batch depends on why:

    - a connection error, 5xx, 408 or 429 that outlasted the client's retries: the events stay
      buffered, in order, and the next :meth:`flush` sends them again (nothing is stored twice);
    - any other 4xx (422 a bad event, 409 a reused seq, 413, 401 …): the server would refuse the
      same batch again whatever happens, so it leaves the buffer and is kept in ``refused`` as
      ``(events, error)``, the events as sent (each with its ``seq``); later events are not held up.
      The run's receipts then show those seqs as ``gaps``; once the cause is fixed,
      ``client.post_events(events)`` posts them again as they are.

    Either way the error is raised, and events after the failed batch stay buffered.
    """

    def __init__(
        self, client: Client, *, batch_size: int = 500, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    ) -> None:
        if batch_size < 1 or max_batch_bytes < 1:
            raise ValueError("batch_size and max_batch_bytes must be positive")
        self.client = client
        self.batch_size = min(batch_size, MAX_EVENTS_PER_REQUEST)
        self.max_batch_bytes = max_batch_bytes
        self.receipts: list[Receipt] = []
        self.refused: list[tuple[list[JsonObject], FootprintError]] = []
        self._next_seq: dict[str, int] = {}
        self._buffer: list[bytes] = []
        self._buffered_bytes = 0
        self._lock = threading.RLock()

    @property
    def pending(self) -> int:
        """Events numbered but not yet acknowledged by the server."""
        return len(self._buffer)

    def send(self, event: Mapping[str, Any]) -> list[Receipt]:
        """Number and buffer one ``{type, payload, meta: {runId, …}}`` event.

        Posts when the buffer is full and returns that post's receipts (else ``[]``). If that post
        fails, the error is raised; the events stay buffered for the next :meth:`flush`, but for a
        batch the server refused with a final 4xx, which moves to ``refused`` (see the class).
        """
        meta = event.get("meta")
        run_id = meta.get("runId") if isinstance(meta, Mapping) else None
        if not isinstance(run_id, str) or not run_id:
            raise ValueError("every event needs meta.runId (a non-empty string): seq is numbered per run")
        with self._lock:
            seq = self._next_seq.get(run_id, 0)
            encoded = _dumps({**event, "seq": seq}).encode("utf-8")  # serialised once, now
            # Buffered before anything can fail, so a seq once handed out is never skipped.
            self._buffer.append(encoded)
            self._buffered_bytes += len(encoded) + 1
            self._next_seq[run_id] = seq + 1
            if len(self._buffer) >= self.batch_size or self._buffered_bytes > self.max_batch_bytes:
                return self._drain(keep_partial=True)
            return []

    def send_all(self, events: Iterable[Mapping[str, Any]]) -> list[Receipt]:
        """:meth:`send` each event, then :meth:`flush`; the receipts of every post made."""
        receipts: list[Receipt] = []
        for event in events:
            receipts += self.send(event)
        return receipts + self.flush()

    def flush(self) -> list[Receipt]:
        """Post everything buffered, batch by batch, and return the receipts of these posts."""
        return self._drain(keep_partial=False)

    def _drain(self, *, keep_partial: bool) -> list[Receipt]:
        """Post batches cut at both limits; with ``keep_partial`` a last, unfilled one stays buffered."""
        receipts: list[Receipt] = []
        with self._lock:
            while self._buffer:
                batch: list[bytes] = []
                size = 0
                for encoded in self._buffer:
                    if batch and (len(batch) >= self.batch_size or size + len(encoded) + 1 > self.max_batch_bytes):
                        break
                    batch.append(encoded)
                    size += len(encoded) + 1
                if keep_partial and len(batch) == len(self._buffer) and len(batch) < self.batch_size:
                    break
                try:
                    posted = self.client._post_event_bodies(batch)
                except FootprintError as error:
                    if error.status < 500 and error.status not in RETRIED_4XX_STATUSES:
                        # Refused for good: re-posting it would only block every later event.
                        del self._buffer[: len(batch)]
                        self._buffered_bytes -= size
                        self.refused.append(([json.loads(encoded) for encoded in batch], error))
                    raise
                # Only after the server's COMMIT: a failure above leaves the batch buffered.
                del self._buffer[: len(batch)]
                self._buffered_bytes -= size
                receipts += posted
                self.receipts += posted
        return receipts

    def close(self) -> list[Receipt]:
        """Flush what is left. Call it (or use ``with``) before the process exits."""
        return self.flush()

    def __enter__(self) -> EventSender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ArtifactStore:
    """The five verbs of the framework's artifact port (plus resolve) over HTTP, for one scope.

    The scope travels in the ``AF-Scope`` header (base64url of its JSON), never in the URL, so it
    stays out of access logs. A ref that does not match the grammar (``art_`` + 22 ASCII letters
    and digits) is absent without a request: ``head``/``get`` return None, ``delete`` does
    nothing. Otherwise only a 404 carrying ``ERR_ARTIFACT_NOT_FOUND`` means "absent" (missing,
    expired, swept or another scope's alike); every other error raises.
    """

    def __init__(self, client: Client, scope: Mapping[str, str]) -> None:
        self.client = client
        self.scope = dict(scope)
        raw = _dumps(self.scope).encode("utf-8")
        self._headers = {"AF-Scope": base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")}

    def _call(self, method: str, path: str, document: Any = None, **options: Any) -> Any:
        """A call in this scope; `path` is under /api/v1 (the spec's /af/v1)."""
        return self.client._json(method, f"{API}{path}", document, headers=self._headers, **options)

    def put(
        self,
        kind: str,
        media_type: str,
        data: Any,
        *,
        label: str | None = None,
        digest: bool = False,
        expires_at: int | None = None,
        origin: Mapping[str, Any] | None = None,
        parent_refs: Sequence[str] | None = None,
        shape: Shape | None = None,
    ) -> JsonObject:
        """Store ``data`` and return its meta (``meta["ref"]`` is the claim check to pass around).

        The payload shape follows the value: ``str`` is stored as text, ``bytes`` as binary,
        anything else as JSON text written by ``json.dumps(separators=(",", ":"),
        ensure_ascii=False)``, lone surrogates escaped as ``\\ud800`` (as JSON.stringify writes
        them). The server keeps that exact text (and digests it), and Python's text differs from
        JavaScript's JSON.stringify for some floats (``1.0`` vs ``1``,
        ``1e+16`` vs ``10000000000000000``): to reproduce a JS agent's bytes and digest, pass the
        JSON text yourself with ``shape="json"``.

        ``digest=True`` asks for a sha-256 digest that every ``get`` re-checks; ``expires_at`` is
        epoch milliseconds. Not retried except on a refused connection: a retried put could mint a
        second ref for the same data.
        """
        document: JsonObject = {"kind": kind, "mediaType": media_type, "payload": _payload_of(data, shape)}
        for name, value in (
            ("label", label),
            ("digest", "sha-256" if digest else None),
            ("expiresAt", expires_at),
            ("origin", dict(origin) if origin is not None else None),
            ("parentRefs", list(parent_refs) if parent_refs is not None else None),
        ):
            if value is not None:
                document[name] = value
        meta: JsonObject = self._call("POST", "/artifacts", document, retry=_Retry.REFUSED_ONLY)["meta"]
        return meta

    def head(self, ref: str) -> JsonObject | None:
        """The artifact's meta, or None when it is absent from this scope (or ``ref`` is no ref)."""
        if not _is_ref(ref):
            return None
        try:
            meta: JsonObject = self._call("GET", f"/artifacts/{_segment(ref)}/meta")["meta"]
        except FootprintError as error:
            if error.status == 404 and error.code == NOT_FOUND:
                return None
            raise
        return meta

    def get(self, ref: str) -> tuple[JsonObject, Any] | None:
        """``(meta, value)`` with the value decoded by its shape (str, parsed JSON, or bytes);
        None when absent (or ``ref`` is no ref). Bytes that fail their digest raise
        ``ERR_ARTIFACT_INTEGRITY`` (500)."""
        if not _is_ref(ref):
            return None
        try:
            answer = self._call("GET", f"/artifacts/{_segment(ref)}")
        except FootprintError as error:
            if error.status == 404 and error.code == NOT_FOUND:
                return None
            raise
        return answer["meta"], _decode_payload(answer["payload"])

    def delete(self, ref: str) -> None:
        """Delete the artifact; absent refs are fine (the server answers 204 either way), and a
        string that is no ref is a no-op without a request."""
        if _is_ref(ref):
            self._call("DELETE", f"/artifacts/{_segment(ref)}")

    def list(self, limit: int | None = None, cursor: str | None = None) -> tuple[builtins.list[JsonObject], str | None]:
        """One page of the scope's live metas, newest first, and the cursor of the next (or None)."""
        answer = self._call("GET", "/artifacts", query={"limit": limit, "cursor": cursor})
        return list(answer["artifacts"]), answer.get("cursor")

    def capabilities(self) -> JsonObject:
        """What the store does (list limits, retention, digest algorithms, payload shapes)."""
        result: JsonObject = self._call("GET", "/capabilities")
        return result

    def resolve(
        self,
        tool_name: str,
        wants: Mapping[str, str],
        args: Mapping[str, Any],
        input_schema: Mapping[str, Any] | None = None,
    ) -> JsonObject:
        """Resolve a tool's ``wants`` exactly as the framework's dispatch does.

        Returns the server's result: ``{"ok": True, "args", "wanted", "resolved"}`` or
        ``{"ok": False, "refusals", "refusal"}`` (refusals are answers, not errors; a malformed
        ``wants`` declaration raises ``ERR_INVALID_WANTS``).
        """
        document: JsonObject = {"toolName": tool_name, "wants": dict(wants), "args": dict(args)}
        if input_schema is not None:
            document["inputSchema"] = dict(input_schema)
        result: JsonObject = self._call("POST", "/wants:resolve", document)
        return result


def _payload_of(data: Any, shape: Shape | None) -> dict[str, str]:
    if shape is None:
        if isinstance(data, bytes | bytearray | memoryview):
            shape = "binary"
        elif isinstance(data, str):
            shape = "text"
        else:
            shape = "json"
    if shape == "binary":
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError("shape='binary' takes bytes")
        return {"shape": "binary", "value": base64.b64encode(bytes(data)).decode("ascii")}
    if shape == "text":
        if not isinstance(data, str):
            raise TypeError("shape='text' takes a str")
        return {"shape": "text", "value": data}
    return {"shape": "json", "value": data if isinstance(data, str) else _dumps(data)}


def _decode_payload(payload: Mapping[str, Any]) -> Any:
    shape, value = payload["shape"], payload["value"]
    if shape == "binary":
        return base64.b64decode(value)
    if shape == "json":
        return json.loads(value)
    return value
