// Produces the event sequences of tests/ledger/test_run_status_endings.py with agentfootprint
// 9.62.0's own Agent and mock provider (no network, deterministic but for ids and clocks):
//   node tests/data/run-endings/generate.mjs ../shared/tools/agentfootprint-9.62.0 > tests/data/run-endings/endings.json
// One entry per ending: what run()/resume() did (returned, paused or threw, with the error's
// name) and every event dispatched, in order.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const build = path.resolve(process.argv[2] ?? '../shared/tools/agentfootprint-9.62.0');
const load = (file) => import(pathToFileURL(path.join(build, 'dist/esm', file)).href);
const af = await load('index.js');
const { mock } = await load('providers.js');
const { Agent, allow, deny, ask, defineTool, checkInApproved } = af;

const lookup = () =>
  defineTool({
    name: 'lookup',
    description: 'Looks an order up.',
    inputSchema: { type: 'object', properties: { id: { type: 'string' } } },
    execute: async () => 'order 7: shipped',
  });
const toolCall = { content: '', toolCalls: [{ id: 'call-1', name: 'lookup', args: { id: '7' } }] };

function agentWith(setup, provider, options = {}) {
  return setup(Agent.create({ provider, model: 'mock-small', ...options }).system('You answer.')).build();
}

async function capture(name, setup, provider, drive, options) {
  const agent = agentWith(setup, provider, options);
  const events = [];
  agent.on('*', (event) => events.push({ type: event.type, payload: event.payload, meta: event.meta }));
  let ending;
  try {
    const result = await drive(agent);
    ending = result && typeof result === 'object' && 'paused' in result ? { returned: 'paused' } : { returned: 'answer' };
  } catch (err) {
    ending = { threw: err?.name ?? 'Error', code: err?.code ?? null };
  }
  await agent.drainObservers?.({ timeoutMs: 2000 });
  return { name, ending, events };
}

const denyAt = (moment) => ({
  name: `refuse-${moment}`,
  onMessage: (msg) => (msg.moment === moment || msg.phase === moment ? deny(`no ${moment} today`) : allow()),
});
const fourEyes = { name: 'four-eyes', onToolCall: () => ask({ question: 'May I?' }) };
const approved = checkInApproved({ by: 'ada' });
async function pauseThenResume(agent) {
  const paused = await agent.run({ message: 'where is 7' });
  return agent.resume(paused.checkpoint, approved);
}

const endings = [];
endings.push(await capture('completed', (b) => b, mock({ reply: 'Done.' }), (a) => a.run({ message: 'hi' })));
endings.push(
  await capture('denied-input', (b) => b.messageMiddleware(denyAt('input')), mock({ reply: 'Done.' }), (a) =>
    a.run({ message: 'hi' }),
  ),
);
endings.push(
  await capture('denied-output', (b) => b.messageMiddleware(denyAt('output')), mock({ reply: 'Done.' }), (a) =>
    a.run({ message: 'hi' }),
  ),
);
endings.push(
  await capture(
    'denied-output-after-tool',
    (b) => b.tool(lookup()).messageMiddleware(denyAt('output')),
    mock({ replies: [toolCall, 'Order 7 shipped.'] }),
    (a) => a.run({ message: 'where is 7' }),
  ),
);
endings.push(
  await capture(
    'failed',
    (b) => b,
    mock({ respond: () => { throw new Error('provider down'); } }),
    (a) => a.run({ message: 'hi' }),
  ),
);
endings.push(
  await capture(
    'paused',
    (b) => b.tool(lookup()).toolMiddleware({ name: 'four-eyes', onToolCall: () => ask({ question: 'May I?' }) }),
    mock({ replies: [toolCall, 'Order 7 shipped.'] }),
    (a) => a.run({ message: 'where is 7' }),
  ),
);
endings.push(
  await capture('cancelled', (b) => b, mock({ reply: 'Done.', thinkingMs: 300 }), (a) => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('the caller gave up')), 20);
    return a.run({ message: 'hi' }, { signal: controller.signal });
  }),
);
endings.push(
  await capture('timed-out', (b) => b, mock({ reply: 'Done.', thinkingMs: 300 }), (a) =>
    a.run({ message: 'hi' }, { timeoutMs: 20 }),
  ),
);
endings.push(
  await capture('halted', (b) => b.tool(lookup()), mock({ replies: [toolCall, 'Order 7 shipped.'] }), (a) =>
    a.run({ message: 'where is 7' }),
    { permissionChecker: { name: 'no-lookups', check: () => ({ result: 'halt', reason: 'security:lookup' }) } },
  ),
);
endings.push(
  await capture(
    'resumed-completed',
    (b) => b.tool(lookup()).toolMiddleware(fourEyes),
    mock({ replies: [toolCall, 'Order 7 shipped.'] }),
    pauseThenResume,
  ),
);
endings.push(
  await capture(
    'resumed-denied-output',
    (b) => b.tool(lookup()).toolMiddleware(fourEyes).messageMiddleware(denyAt('output')),
    mock({ replies: [toolCall, 'Order 7 shipped.'] }),
    pauseThenResume,
  ),
);
process.stdout.write(JSON.stringify({ agentfootprintVersion: '9.62.0', endings }, null, 1) + '\n');
