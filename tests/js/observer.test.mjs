// Replays real agentfootprint 9.62.0 event captures through static/js/footprint-observer.js into a
// live ledger server (FOOTPRINT_URL, FOOTPRINT_KEY with scopes ingest + read), then reads the runs
// back. Run by tests/clients/test_js_observer.py: `node --test tests/js/observer.test.mjs`.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { test } from 'node:test';

const URL_ = process.env.FOOTPRINT_URL;
const KEY = process.env.FOOTPRINT_KEY;
assert.ok(URL_ && KEY, 'set FOOTPRINT_URL and FOOTPRINT_KEY (a key with the ingest and read scopes)');

const { attachFootprintObserver } = await loadObserver();

// Without a package.json saying "type": "module", Node older than 20.19 / 22.12 reads a .js file
// as CommonJS; there the same source is imported as a module from a data: URL.
async function loadObserver() {
  const file = new URL('../../static/js/footprint-observer.js', import.meta.url);
  try {
    return await import(file);
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    const source = await readFile(file);
    return import(`data:text/javascript;base64,${source.toString('base64')}`);
  }
}

async function capture(name) {
  const { events } = JSON.parse(await readFile(new URL(`../data/${name}`, import.meta.url), 'utf8'));
  // `seq` was added while capturing (0-based across the whole file); the observer numbers per run.
  return events.map(({ seq, ...event }) => event);
}

/** An object shaped like an agentfootprint Agent as far as the observer cares: on('*', fn). */
function fakeAgent() {
  const agent = {
    listener: null,
    on(type, fn) {
      assert.equal(type, '*');
      agent.listener = fn;
      return () => { agent.listener = null; };
    },
    emit(events) { for (const event of events) agent.listener(event); },
  };
  return agent;
}

async function get(path, key = KEY) {
  const response = await fetch(`${URL_}${path}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: response.status, body: await response.json() };
}

function observe(agent, options = {}) {
  const receipts = [];
  const errors = [];
  const observer = attachFootprintObserver(agent, {
    url: URL_, key: KEY, onReceipt: (r) => receipts.push(r), onError: (e) => errors.push(e), ...options,
  });
  return { observer, receipts, errors };
}

test('a complete run arrives whole, numbered 0..75, with an intact hash chain', async () => {
  const events = await capture('a-run-recording/events.json');
  const runId = events[0].meta.runId;
  const agent = fakeAgent();
  const { observer, receipts, errors } = observe(agent, { batchSize: 20 });
  agent.emit(events);
  await observer.close();
  assert.equal(agent.listener, null, 'close() unsubscribes');
  assert.deepEqual(errors, []);
  assert.ok(receipts.length >= 4, `76 events in batches of 20 give 4 receipts, got ${receipts.length}`);
  assert.deepEqual(receipts.at(-1).gaps, []);

  const run = await get(`/api/v1/runs/${encodeURIComponent(runId)}`);
  assert.equal(run.status, 200);
  assert.equal(run.body.events, 76);
  assert.equal(run.body.lastSeq, 75);
  assert.equal(run.body.hasGaps, false);
  const verify = await get(`/api/v1/runs/${encodeURIComponent(runId)}/verify`);
  assert.equal(verify.status, 200);
  assert.equal(verify.body.valid, true, JSON.stringify(verify.body));
});

test('consumer-scope pause events are folded into the run that paused', async () => {
  const events = await capture('b-middleware/events-approved.json');
  const pausedRun = events[0].meta.runId;
  const resumedRun = events.at(-1).meta.runId;
  const pauses = events.filter((e) => e.meta.runId === 'consumer-scope');
  assert.deepEqual(pauses.map((e) => e.type), ['agentfootprint.pause.request', 'agentfootprint.pause.resume']);
  const agent = fakeAgent();
  const { observer, errors } = observe(agent);
  agent.emit(events);
  await observer.close();
  assert.deepEqual(errors, []);
  assert.equal(observer.runId, resumedRun);

  const paused = events.filter((e) => e.meta.runId === pausedRun).length + pauses.length;
  const run = await get(`/api/v1/runs/${encodeURIComponent(pausedRun)}`);
  assert.equal(run.body.events, paused);
  assert.equal(run.body.lastSeq, paused - 1);
  assert.equal((await get(`/api/v1/runs/${encodeURIComponent(pausedRun)}/verify`)).body.valid, true);
  const stored = (await get(`/api/v1/runs/${encodeURIComponent(pausedRun)}/events?limit=1000`)).body.events;
  for (const pause of pauses) {
    const copy = stored.find((e) => e.type === pause.type);
    assert.ok(copy, `${pause.type} is stored under the paused run`);
    // Verbatim but for the runId.
    assert.deepEqual(copy.payload, pause.payload);
    assert.deepEqual(copy.meta, { ...pause.meta, runId: pausedRun });
  }
  // pause.resume is emitted before the resumed run's first event, so it stays with the paused run.
  assert.equal(stored.at(-1).type, 'agentfootprint.pause.resume');

  const resumed = await get(`/api/v1/runs/${encodeURIComponent(resumedRun)}`);
  assert.equal(resumed.body.events, events.filter((e) => e.meta.runId === resumedRun).length);
  assert.equal((await get('/api/v1/runs/consumer-scope')).status, 404);
});

test('connection errors and 5xx are retried; 4xx are reported once and dropped', async () => {
  // A proxy in front of the live server: it drops the first connection and answers the second
  // request 503, then forwards.
  let requests = 0;
  const proxy = createServer(async (req, res) => {
    requests += 1;
    if (requests === 1) return req.socket.destroy();
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    if (requests === 2) return res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"busy"}');
    const upstream = await fetch(`${URL_}${req.url}`, {
      method: req.method,
      headers: { authorization: req.headers.authorization, 'content-type': 'application/json' },
      body: Buffer.concat(chunks),
    });
    res.writeHead(upstream.status, { 'content-type': 'application/json' }).end(await upstream.text());
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const via = `http://127.0.0.1:${proxy.address().port}`;
  try {
    const runId = `retry-${Date.now()}`;
    const events = (await capture('a-run-recording/events.json')).map((e) => ({ ...e, meta: { ...e.meta, runId } }));
    const agent = fakeAgent();
    const { observer, receipts, errors } = observe(agent, { url: via });
    agent.emit(events);
    await observer.close();
    assert.deepEqual(errors, []);
    assert.equal(requests, 3);
    assert.deepEqual(receipts.map((r) => [r.runId, r.accepted, r.lastSeq]), [[runId, 76, 75]]);

    const other = fakeAgent();
    const denied = observe(other, { url: via, key: 'afk_not_a_key' });
    other.emit(events.slice(0, 3).map((e) => ({ ...e, meta: { ...e.meta, runId: `${runId}-denied` } })));
    await denied.observer.close();
    assert.equal(requests, 4, 'a 401 is not retried');
    assert.equal(denied.errors.length, 1);
    assert.equal(denied.errors[0].status, 401);
    assert.equal(denied.errors[0].retryable, false);
    assert.match(denied.errors[0].message, /Bearer/);   // the server's own words
    assert.equal((await get(`/api/v1/runs/${runId}-denied`)).status, 404);
  } finally {
    proxy.close();
    proxy.closeAllConnections();   // fetch keeps connections alive; they would hold the process open
  }
});
