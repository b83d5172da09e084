// Sends an agentfootprint agent's typed events to the footprint ledger server, and carries its
// pauses to the ledger's inbox. Dependency-free ES module: Node >= 18 (global fetch) and browsers.
//
//   import { attachFootprintObserver, openAsk, waitForDecision } from '/static/js/footprint-observer.js';
//   const server = { url: 'https://ledger.example.com', key: 'afk_…' };   // key scopes: ingest (+ asks)
//   const observer = attachFootprintObserver(agent, server);
//   let outcome = await agent.run(input);
//   while (outcome?.paused) {
//     // observer.runId is the run that paused: the checkpoint itself does not name it.
//     const ask = await openAsk(server, observer.runId, outcome);
//     const decision = await waitForDecision(server, ask.id, { timeoutMs: 24 * 3600_000 });
//     // A question (askHuman) resumes with its answer, the tool's result; the rest with the decision.
//     outcome = await agent.resume(outcome.checkpoint, ask.kind === 'plain' ? decision.answer : decision);
//   }
//   await observer.close();

// agentfootprint 9.62.0 emits pause.request / pause.resume under this runId (and no sessionId).
const CONSUMER_SCOPE = 'consumer-scope';
// A paused run emits no turn_end, so a pause also ends what can be sent of the run for now.
const RUN_ENDS = new Set(['agentfootprint.agent.turn_end', 'agentfootprint.pause.request']);
// The server refuses bodies over 8 MiB by default. Lengths are counted in UTF-16 units, each at
// most 3 bytes of UTF-8, so 2 Mi units stay under the limit whatever batchSize says.
const MAX_BATCH_CHARS = 2 * 1024 * 1024;
// The server refuses a request of more events (FOOTPRINT_MAX_EVENTS_PER_REQUEST, 413): a larger
// batchSize still sends at most this many at a time.
const MAX_BATCH_EVENTS = 5000;
const REQUEST_TIMEOUT_MS = 30_000;
// 408 and 429 mean "not now", not "not this request": retried like a 5xx.
const RETRIED_4XX = new Set([408, 429]);
const RETRY_AFTER_MAX_MS = 60_000;

export function attachFootprintObserver(agent, {
  url, key, batchSize = 200, flushIntervalMs = 1000, maxRetries = 8, onReceipt,
  onError = (error) => console.error('[footprint-observer]', error.message),
} = {}) {
  if (!url || !key) throw new TypeError('attachFootprintObserver(agent, {url, key}): url and key are required');
  const server = { url, key };
  const perBatch = Math.min(batchSize, MAX_BATCH_EVENTS);
  const nextSeq = new Map();   // runId -> next seq; the server's idempotency is per (runId, seq)
  let queue = [];              // events already serialized (see listener)
  let lastRunId = null;
  let unfolded = [];           // consumer-scope events seen before any run: folded into the next
  let busy = false;
  let closed = false;
  let sending = Promise.resolve();

  function listener(event) {
    if (closed) return;
    let meta = event?.meta ?? {};
    if (meta.runId === CONSUMER_SCOPE) {
      // Fold the pause event into the run that paused (the last real runId seen). Left under
      // 'consumer-scope', every agent would number its pauses 0, 1, … in one shared run, and the
      // second agent's pause would collide with the first's seq (409, batch dropped). The event
      // is sent verbatim but for meta.runId, in a copy: the framework's own object is not touched.
      // Before any run (an observer attached for a resume: pause.resume comes before the resumed
      // run's first event) it waits for the next run and goes first in it.
      if (!lastRunId) {
        unfolded.push(event);
        return;
      }
      meta = { ...meta, runId: lastRunId };
    } else if (typeof meta.runId === 'string' && meta.runId) {
      lastRunId = meta.runId;
      const waiting = unfolded;
      unfolded = [];
      waiting.forEach(listener);
    } else {
      // One bad event makes the server refuse (422) its whole batch: keep it out of the batch.
      onError(new Error(`event ${event?.type} has no meta.runId; not sent`));
      return;
    }
    enqueue(event, meta);
  }

  function enqueue(event, meta) {
    const seq = nextSeq.get(meta.runId) ?? 0;
    let json;
    try {
      // Serialized now, not at send time: a retry must resend the very bytes the server may have
      // stored, and the framework's objects could change after the listener returns.
      json = JSON.stringify({ seq, type: event.type, payload: event.payload, meta });
    } catch (error) {
      onError(new Error(`event ${event.type} of run ${meta.runId} is not JSON (${error.message}); not sent`));
      return;   // no seq used, so the run has no gap
    }
    nextSeq.set(meta.runId, seq + 1);
    queue.push(json);
    if (queue.length >= perBatch || RUN_ENDS.has(event.type)) kick();
  }

  async function drain() {
    busy = true;
    try {
      while (queue.length) {
        let chars = 0;
        let n = 0;
        while (n < queue.length && n < perBatch && (n === 0 || chars + queue[n].length < MAX_BATCH_CHARS)) {
          chars += queue[n++].length + 1;
        }
        const batch = queue.splice(0, n);
        let answer;
        try {
          answer = await call(server, '/api/v1/events', {
            method: 'POST', body: `{"events":[${batch.join(',')}]}`,
          }, { maxRetries });
        } catch (error) {
          error.events = batch.length;
          onError(error);
          // A 4xx (except 408 and 429) will be refused again whatever happens: drop it. Anything else is
          // kept, in order, for the next flush; resending is safe because ingestion is idempotent.
          if (error.retryable) {
            queue = batch.concat(queue);
            throw error;
          }
          continue;
        }
        // The receipts arrive after COMMIT: from here on the batch is stored, whatever onReceipt does.
        if (onReceipt) (answer?.runs ?? []).forEach((receipt) => onReceipt(receipt));
      }
    } finally {
      busy = false;
    }
  }

  // One send at a time, in capture order: a run's chain grows in seq order and its receipt's
  // gaps mean events really missing, not merely still in flight.
  function flush() {
    const done = sending.then(drain);
    sending = done.catch(() => {});
    return done;
  }

  function kick() {
    // Background sends report through onError; a drain already running picks up new events.
    if (!busy && queue.length) flush().catch(() => {});
  }

  const timer = setInterval(kick, flushIntervalMs);
  timer.unref?.();   // Node: never keep a finished process alive for the timer
  const unsubscribe = agent.on('*', listener);

  return {
    /** The last real runId seen: after a pause, the run that paused. */
    get runId() { return lastRunId; },
    /** Sends everything captured so far; rejects if events remain unsent after maxRetries. */
    flush,
    /** Stops listening and sends what is left. */
    async close() {
      // Pause events no run followed: nothing to fold them into, so they go as they came.
      unfolded.forEach((event) => enqueue(event, event.meta));
      unfolded = [];
      closed = true;
      clearInterval(timer);
      if (typeof unsubscribe === 'function') unsubscribe();
      else agent.off?.('*', listener);
      return flush();
    },
  };
}

/**
 * Opens the ledger ask for a paused outcome of agent.run()/resume(); answers the ask {id, status, …}.
 * Call it as the run pauses: pausedAtMs (default now, the clock of the run's events) orders the
 * session's asks, and a retry resends the same body.
 */
export async function openAsk(server, runId, pauseOutcome, { sessionId, deadline, onTimeout, pausedAtMs = Date.now() } = {}) {
  // Only the keys the server knows: it refuses unknown fields, and the outcome may grow new ones.
  const { pauseData, checkpoint, ask, checkIn } = pauseOutcome ?? {};
  const body = JSON.stringify({ runId, pauseData, checkpoint, ask, checkIn, sessionId, deadline, onTimeout, pausedAtMs });
  const answer = await call(server, '/api/v1/asks', { method: 'POST', body });   // idempotent per tool call
  return answer.ask;
}

/**
 * Resolves with the decision for agent.resume(checkpoint, decision) once a person decides. Each
 * request is held open by the server for up to 55 s (a long poll, not a tight loop). Rejects with
 * error.timedOut after timeoutMs; the run simply stays paused and its checkpoint stays good.
 * Rejects with the server's 409 (error.detail.code 'ERR_ASK_SUPERSEDED', error.detail.supersededBy)
 * once the ask's session paused again: no run waits on that ask (it opens again only if a late
 * pause event shows it was the session's latest after all).
 */
export async function waitForDecision(server, askId, { timeoutMs = Infinity } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // In milliseconds, sent as fractional seconds: a whole-second floor would ask ?wait=0 again
    // and again, as fast as the server answers, through the last second before the deadline.
    const waitMs = Math.round(Math.max(0, Math.min(55_000, deadline - Date.now())));
    const answer = await call(server, `/api/v1/asks/${encodeURIComponent(askId)}/decision?wait=${waitMs / 1000}`,
      { method: 'GET' }, { timeoutMs: waitMs + 15_000 });
    if (answer.status === 'decided') return answer.decision;
    if (deadline - Date.now() <= 0) {
      throw Object.assign(new Error(`ask ${askId} was not decided within ${timeoutMs} ms`), { timedOut: true });
    }
    // The server had no thread to hold this wait on: it says when to ask again.
    const pauseMs = Math.min(Math.max(Number(answer.retryAfterMs) || 0, 0), 60_000, deadline - Date.now());
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
}

// One JSON request with retries: network errors, 5xx, 408 and 429 are retried with exponential
// backoff and jitter (so many agents coming back from one outage do not retry in step), waiting at
// least what Retry-After asks (capped at 60 s); other 4xx never are, and the thrown error carries
// the server's message and its body (a 422 names each bad event).
async function call({ url, key }, path, init, { maxRetries = 8, timeoutMs = REQUEST_TIMEOUT_MS } = {}) {
  const target = url.replace(/\/+$/, '') + path;
  const headers = { authorization: `Bearer ${key}`, accept: 'application/json' };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  for (let attempt = 0; ; attempt++) {
    let error;
    try {
      const response = await fetch(target, { ...init, headers, signal: AbortSignal.timeout(timeoutMs) });
      const text = await response.text();
      if (response.ok) return text ? JSON.parse(text) : {};
      let detail = null;
      try { detail = JSON.parse(text); } catch { /* not JSON: a proxy's page */ }
      const message = `${init.method} ${path}: ${response.status} ${detail?.error ?? text.slice(0, 200)}`;
      error = Object.assign(new Error(message), {
        status: response.status, detail, retryable: response.status >= 500 || RETRIED_4XX.has(response.status),
        retryAfterMs: retryAfterMs(response.headers.get('retry-after')),
      });
    } catch (thrown) {
      if (thrown instanceof SyntaxError) throw thrown;   // a 2xx that is not JSON: sending again won't help
      error = Object.assign(new Error(`${init.method} ${path}: ${thrown.message}`), { cause: thrown, retryable: true });
    }
    if (!error.retryable) throw error;
    if (attempt >= maxRetries) {
      error.message += ` (gave up after ${attempt + 1} attempts)`;
      throw error;
    }
    const ceiling = Math.min(30_000, 250 * 2 ** attempt);
    const backoff = ceiling / 2 + Math.random() * ceiling / 2;
    await new Promise((resolve) => setTimeout(resolve, Math.max(backoff, error.retryAfterMs ?? 0)));
  }
}

// Retry-After as milliseconds (delta-seconds or an HTTP date), 0 to 60 s; 0 when absent or unreadable.
function retryAfterMs(value) {
  if (!value) return 0;
  const trimmed = value.trim();
  const ms = /^\d+(\.\d+)?$/.test(trimmed) ? Number(trimmed) * 1000 : Date.parse(trimmed) - Date.now();
  return Number.isFinite(ms) ? Math.min(Math.max(ms, 0), RETRY_AFTER_MAX_MS) : 0;
}
