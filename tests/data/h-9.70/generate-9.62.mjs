// Produces mock-9.62-shapes.json with the built agentfootprint 9.62.0 and its offline mock provider:
// node tests/data/h-9.70/generate-9.62.mjs /work/shared/tools/agentfootprint-9.62.0 > tests/data/h-9.70/mock-9.62-shapes.json
const root = process.argv[2];
const af = await import(`${root}/dist/esm/index.js`);
const { mock } = await import(`${root}/dist/esm/providers.js`);

const tools = [
  af.defineTool({
    name: 'flogi_for_port',
    description: 'FLOGI entries for one interface',
    inputSchema: { type: 'object', properties: { port: { type: 'string' } }, required: ['port'] },
    execute: ({ port }) =>
      af.absent({
        what: `FLOGI entries on ${port}`,
        checked: ['shq-fab-a: the live fcns database', { what: 'window: the last 24h', why: 'FLOGI history retention' }],
        notChecked: [{ what: 'the archived FLOGI history', why: 'older than the 24h window' }],
        cannotCover: [{ what: 'ports on the peer fabric', why: 'this collector is scoped to one fabric' }],
      }),
  }),
  af.defineTool({
    name: 'replication_health',
    description: 'Replication health across the estate',
    inputSchema: { type: 'object', properties: {} },
    execute: () =>
      af.coverage(
        { verdict: 'healthy' },
        {
          checked: ['SRDF pair state on all 4 arrays (live query)'],
          notChecked: [{ what: 'NDM migration sessions', why: 'the API timed out <retry>' }],
          cannotCover: [{ what: 'host-side multipathing', why: 'no collector runs on the ESX hosts' }],
        },
      ),
  }),
  af.defineTool({
    name: 'port_iops',
    description: 'Per-port IOPS',
    inputSchema: { type: 'object', properties: {} },
    execute: () =>
      af.semantic({
        series: [{ t: '2026-08-26T10:00:00Z', entity: 'fc1/3', metric: 'avg_iops', value: 420 }],
        grain: { interval: '30m', aggregation: 'avg', is_counter: false },
        provenance: { measured_at: '2026-08-26T10:00:00Z', source: 'InfluxDB SwitchPortStats', age_seconds: 3600 },
        coverage: {
          checked: ['shq-fab-a: all 48 FC ports'],
          notChecked: [{ what: 'the peer fabric', why: 'this collector is scoped to one fabric' }],
        },
      }),
  }),
  af.defineTool({
    name: 'lookup_volume',
    description: 'Look a volume up by id',
    inputSchema: {
      type: 'object',
      properties: { volumeId: { type: 'string', pattern: '^vol-[0-9]+$', description: 'A volume id like vol-0042' } },
      required: ['volumeId'],
    },
    execute: ({ volumeId }) => `volume ${volumeId}`,
  }),
];

const provider = mock({
  replies: [
    { content: '', toolCalls: [{ id: 'h1', name: 'flogi_for_port', args: { port: 'fc1/3' } }] },
    { content: '', toolCalls: [{ id: 'h2', name: 'replication_health', args: {} }] },
    { content: '', toolCalls: [{ id: 'h3', name: 'port_iops', args: {} }] },
    { content: '', toolCalls: [{ id: 'h4', name: 'lookup_volume', args: { volumeId: 7 } }] },
    { content: 'Replication is healthy as far as checked; fc1/3 saw no FLOGI in 24h.' },
  ],
});
const agent = af.Agent.create({ provider, model: 'mock-small', maxIterations: 8 }).tools(tools).build();
const events = [];
agent.on('*', (e) => events.push({ seq: events.length, type: e.type, payload: e.payload, meta: e.meta }));
const answer = await agent.run({ message: 'Is replication healthy, and is anything logged in on fc1/3?' }, { sessionId: 'fixture-session-h' });
const counts = {};
for (const e of events) counts[e.type] = (counts[e.type] ?? 0) + 1;
process.stdout.write(
  JSON.stringify(
    {
      scenario: 'h: typed result shapes (absent, coverage, semantic) and an enforced argument validation, on the mock provider',
      agentfootprintVersion: '9.62.0',
      answer: typeof answer === 'string' ? answer : answer?.content ?? answer,
      eventTypeCounts: counts,
      events,
    },
    null,
    2,
  ) + '\n',
);
