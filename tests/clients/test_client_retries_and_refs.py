"""The shipped clients' retry rules, refused batches and ref handling (clients/python/footprint_client
and static/js/footprint-observer.js): a final 4xx never wedges the Python EventSender; 429/408 are
retried after Retry-After by both clients; the JS observer honours Retry-After on 503 and its
waitForDecision long-polls to the end of its timeout; the Python artifact verbs check the ref
grammar before a ref reaches a URL; JSON holding lone surrogates round-trips.

Real server (live_server), real HTTP; the JS observer runs under Node like tests/js/observer.test.mjs.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from footprint_client import Client, EventSender, FootprintError  # on sys.path from tests/clients/conftest.py

from ledger.models import RunEvent
from tests.clients.conftest import SCOPE

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
OBSERVER = PROJECT_ROOT / "static" / "js" / "footprint-observer.js"


pytestmark = pytest.mark.django_db(transaction=True)


def _event(run_id: str, i: int, type_: str = "custom.note") -> dict[str, Any]:
    return {"type": type_, "payload": {"i": i}, "meta": {"runId": run_id}}


# --- helpers for the JS observer ------------------------------------------------------------------

# Imports the observer the way tests/js/observer.test.mjs does (file URL, data: URL fallback).
NODE_PRELUDE = """
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
const FILE = new URL(%(observer)s);
async function load() {
  try { return await import(FILE); } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    const source = await readFile(FILE);
    return import(`data:text/javascript;base64,${source.toString('base64')}`);
  }
}
const observerModule = await load();
const URL_ = process.env.FOOTPRINT_URL;
const KEY = process.env.FOOTPRINT_KEY;
function fakeAgent() {
  const agent = { listener: null, on(type, fn) { agent.listener = fn; return () => { agent.listener = null; }; },
                  emit(events) { for (const e of events) agent.listener(e); } };
  return agent;
}
// A proxy in front of the live server: `first(req, res)` answers the first request, the rest are forwarded.
async function proxyWith(first) {
  let requests = 0;
  const proxy = createServer(async (req, res) => {
    requests += 1;
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    if (requests === 1) return first(req, res);
    const upstream = await fetch(`${URL_}${req.url}`, {
      method: req.method,
      headers: { authorization: req.headers.authorization, 'content-type': 'application/json' },
      body: req.method === 'GET' ? undefined : Buffer.concat(chunks),
    });
    res.writeHead(upstream.status, { 'content-type': 'application/json' }).end(await upstream.text());
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${proxy.address().port}`, count: () => requests,
           close: () => { proxy.close(); proxy.closeAllConnections(); } };
}
"""


def _run_node(script: str, tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` is not on PATH: the JS observer tests need Node >= 18")
    path = tmp_path / "review.mjs"
    path.write_text(NODE_PRELUDE % {"observer": json.dumps(OBSERVER.as_uri())} + script)
    completed = subprocess.run(
        [node, str(path)], env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, f"node failed\n{completed.stdout}\n{completed.stderr}"
    return json.loads(completed.stdout.strip().splitlines()[-1])


# --- Python client: EventSender ------------------------------------------------------------------


def test_a_refused_batch_does_not_wedge_the_event_sender_forever(client: Client) -> None:
    """A batch the server refuses with a final 4xx (here a `ledger.` type, 422: it would be refused
    again whatever happens) is raised, leaves the buffer and is kept in `sender.refused` with its
    error, so later events of every run are still delivered. batch_size is capped at the server's
    5,000 events per request."""
    sender = EventSender(client, batch_size=10)
    sender.send(_event("run-bad", 0, type_="ledger.fake"))
    with pytest.raises(FootprintError) as refused:
        sender.flush()
    assert refused.value.status == 422
    assert sender.pending == 0
    [(events, error)] = sender.refused
    assert error is refused.value
    assert [(e["type"], e["seq"]) for e in events] == [("ledger.fake", 0)]

    for i in range(3):
        sender.send(_event("run-good", i))
    assert sum(r.accepted for r in sender.flush()) == 3
    assert [e.seq for e in RunEvent.objects.filter(run__run_id="run-good").order_by("seq")] == [0, 1, 2]
    assert EventSender(client, batch_size=10_000).batch_size == 5_000


def test_a_429_with_retry_after_is_waited_out_not_raised(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers 429 ERR_RATE_LIMITED with Retry-After to every key check from a throttled
    address, a valid key included once its 5 s cache entry has lapsed (footprint_site/auth.py
    verified_key: the throttle is checked before the key), e.g. behind a NAT shared with a noisy
    neighbour. The client retries a 429 like a 5xx: it waits the stated Retry-After (capped at
    60 s; sleep is patched, no clock involved) and then succeeds."""
    import footprint_client

    from footprint_site import auth

    slept: list[float] = []

    def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        auth._failures.clear()  # the throttle window has passed

    monkeypatch.setattr(footprint_client.time, "sleep", fake_sleep)
    now = time.monotonic()
    auth._failures["127.0.0.1"].extend([now] * auth.MAX_FAILURES_PER_WINDOW)  # a neighbour's bad key
    receipts = client.post_events([{"seq": 0, **_event("run-429", 0)}])
    assert receipts[0].accepted == 1
    assert slept
    assert 1 <= max(slept) <= 60


# --- Python client: artifacts --------------------------------------------------------------------


def test_get_of_a_malformed_ref_that_collides_with_a_route_is_absent(client: Client) -> None:
    """Spec (artifacts §1.3): get/head return null and never throw for a ref that is not
    grammar-valid. A ref spoken by a model is passed through verbatim, so such strings happen; the
    client checks the grammar before the ref reaches the URL path, so strings that would hit
    another route ("capabilities", "resolve", "") are None like any other non-ref."""
    store = client.artifacts(SCOPE)
    for not_a_ref in ("capabilities", "resolve", "", "art_0000000000000000000000\n"):
        assert store.get(not_a_ref) is None
        assert store.head(not_a_ref) is None


def test_delete_of_a_non_grammar_ref_is_a_no_op(client: Client) -> None:
    """Spec (artifacts §1.4): deleting "a non-grammar string" is a successful no-op. A ref holding a
    '/' (which the server would decode back into a path separator, missing the route) or naming
    another route is not sent at all."""
    store = client.artifacts(SCOPE)
    store.delete("art_x/y")
    store.delete("capabilities")


def test_a_json_value_read_from_the_store_can_be_put_back(client: Client) -> None:
    """The server stores JSON payloads carrying lone-surrogate escapes as JSON.stringify writes them
    ("\\ud800"; README, Artifacts), and the Python client reads such a payload into a str with a
    lone surrogate. Writing that value back sends the same escape JSON.stringify writes (UTF-8 for
    everything else), so get → put round-trips byte for byte."""
    store = client.artifacts(SCOPE)
    written_by_js = store.put("note/json", "application/json", '{"s":"\\ud800"}', shape="json")
    got = store.get(written_by_js["ref"])
    assert got is not None
    value = got[1]
    assert value == {"s": "\ud800"}
    copy = store.put("note/json", "application/json", value)
    assert copy["bytes"] == written_by_js["bytes"]
    copied = store.get(copy["ref"])
    assert copied is not None
    assert copied[1] == value

    # A surrogate pair held as two code points is written as the one character it encodes.
    sender = EventSender(client)
    sender.send({"type": "custom.note", "payload": {"pair": "\ud83d\ude00"}, "meta": {"runId": "run-s"}})
    assert sum(r.accepted for r in sender.flush()) == 1
    assert RunEvent.objects.get(run__run_id="run-s").doc["payload"] == {"pair": "😀"}


# --- JavaScript observer -------------------------------------------------------------------------


@pytest.fixture
def node_env(live_server: Any, secret: str) -> dict[str, str]:
    return {"FOOTPRINT_URL": live_server.url, "FOOTPRINT_KEY": secret}


def test_js_observer_retries_a_429_instead_of_dropping_the_batch(node_env: dict[str, str], tmp_path: Path) -> None:
    """The server answers 429 ERR_RATE_LIMITED with Retry-After (footprint_site/auth.py; a valid key
    whose 5 s cache lapsed gets it too when its address is throttled, e.g. behind a shared NAT).
    429 means "too many requests, retry later", not "this batch is bad": the observer retries it
    after Retry-After and the batch is delivered, with no error reported."""
    result = _run_node(
        """
const proxy = await proxyWith((req, res) => res
  .writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' })
  .end('{"error":"Too many failed key checks; try again in 1 s.","code":"ERR_RATE_LIMITED"}'));
const agent = fakeAgent();
const errors = [];
const observer = observerModule.attachFootprintObserver(agent, {
  url: proxy.url, key: KEY, onError: (e) => errors.push(e.message),
});
agent.emit([0, 1, 2].map((i) => ({ type: 'custom.note', payload: { i }, meta: { runId: 'js-429' } })));
await observer.close();
const run = await fetch(`${URL_}/api/v1/runs/js-429`, { headers: { authorization: `Bearer ${KEY}` } });
proxy.close();
console.log(JSON.stringify({ errors, requests: proxy.count(), status: run.status, run: await run.json() }));
""",
        tmp_path,
        node_env,
    )
    assert result["errors"] == []
    assert result["status"] == 200
    assert result["run"]["events"] == 3


def test_js_observer_honours_retry_after_on_503(node_env: dict[str, str], tmp_path: Path) -> None:
    """While PostgreSQL is unreachable the server answers 503 with `Retry-After: 2` (README, Bad
    input, faults and limits). The observer waits at least that long before retrying (the longer of
    its own backoff and Retry-After), as the Python client does. Checked without a clock: the delays
    the observer hands to setTimeout are recorded (only calls made from the observer module)."""
    result = _run_node(
        """
const delays = [];
const original = globalThis.setTimeout;
globalThis.setTimeout = function (fn, ms, ...rest) {
  if (/footprint-observer|data:text\\/javascript/.test(new Error().stack)) delays.push(ms);
  return original(fn, ms, ...rest);
};
const proxy = await proxyWith((req, res) => res
  .writeHead(503, { 'content-type': 'application/json', 'retry-after': '2' })
  .end(JSON.stringify({ error: 'The database is unavailable; nothing was stored. Retry shortly.',
                        code: 'ERR_DATABASE_UNAVAILABLE' })));
const agent = fakeAgent();
const errors = [];
const observer = observerModule.attachFootprintObserver(agent, {
  url: proxy.url, key: KEY, onError: (e) => errors.push(e.message),
});
agent.emit([0, 1].map((i) => ({ type: 'custom.note', payload: { i }, meta: { runId: 'js-503' } })));
await observer.close();
proxy.close();
console.log(JSON.stringify({ errors, delays, requests: proxy.count() }));
""",
        tmp_path,
        node_env,
    )
    assert result["errors"] == []
    assert result["requests"] == 2
    assert len(result["delays"]) == 1
    assert result["delays"][0] >= 2000, f"retried after {result['delays'][0]} ms despite Retry-After: 2"


def _js_wait_requests(node_env: dict[str, str], tmp_path: Path, ask_id: int, timeout_ms: int) -> dict[str, Any]:
    """waitForDecision on an ask nobody decides: whether it timed out, and how many requests it sent."""
    return _run_node(
        """
let requests = 0;
const originalFetch = globalThis.fetch;
globalThis.fetch = (...args) => { requests += 1; return originalFetch(...args); };
let timedOut = false;
try {
  await observerModule.waitForDecision({ url: URL_, key: KEY }, Number(process.env.ASK_ID), {
    timeoutMs: Number(process.env.TIMEOUT_MS) });
} catch (error) {
  timedOut = error.timedOut === true;
}
console.log(JSON.stringify({ timedOut, requests }));
""",
        tmp_path,
        {**node_env, "ASK_ID": str(ask_id), "TIMEOUT_MS": str(timeout_ms)},
    )


def test_js_wait_for_decision_does_not_spin_in_its_last_second(
    node_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    """waitForDecision is a long poll, "not a tight loop", to the very end of its timeout: it sends
    the remaining time as a fractional `wait` (millisecond precision; the server takes fractions),
    never `?wait=0` over and over in the last second, and stops once no time remains. For a 1.9 s
    timeout: a handful of requests (here: at most 4), not dozens."""
    ask = client.open_ask("run-js-wait", {"toolCallId": "q1", "toolName": "ask_user", "question": "?"})
    result = _js_wait_requests(node_env, tmp_path, ask["id"], 1900)
    assert result["timedOut"] is True
    assert result["requests"] <= 4, f"{result['requests']} decision requests in 1.9 s"


# --- both clients: a wait the server had no thread for ---------------------------------------------


def test_python_wait_for_decision_asks_again_when_told_instead_of_spinning(
    client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no wait slot free the server answers "open" at once with retryAfterMs: the client waits
    that long before asking again, so 5 s of waiting is a few requests, not hundreds."""
    settings.FOOTPRINT_ASK_WAITS_PER_PROCESS = 0
    ask = client.open_ask("run-busy", {"toolCallId": "q1", "toolName": "ask_user", "question": "?"})
    requests = 0
    original = client._json

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal requests
        requests += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(client, "_json", counted)
    with pytest.raises(TimeoutError):
        client.wait_for_decision(ask["id"], timeout=5)
    assert requests <= 4, f"{requests} decision requests in 5 s"


def test_js_wait_for_decision_asks_again_when_told_instead_of_spinning(
    node_env: dict[str, str], client: Client, tmp_path: Path, settings: Any
) -> None:
    settings.FOOTPRINT_ASK_WAITS_PER_PROCESS = 0
    ask = client.open_ask("run-js-busy", {"toolCallId": "q1", "toolName": "ask_user", "question": "?"})
    result = _js_wait_requests(node_env, tmp_path, ask["id"], 5000)
    assert result["timedOut"] is True
    assert result["requests"] <= 4, f"{result['requests']} decision requests in 5 s"
