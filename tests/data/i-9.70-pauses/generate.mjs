// Regenerates the 9.62.0 files of this folder, e.g.
//   node generate.mjs consent fixture-session-i-consent-a a > consent-a.json
//   node generate.mjs takeover fixture-session-i-takeover-b b > takeover-b.json
// The framework is read from AGENTFOOTPRINT_DIST (default: the built 9.62.0 beside the shared spec).
const dist = process.env.AGENTFOOTPRINT_DIST ?? '/work/shared/tools/agentfootprint-9.62.0/dist/esm';
const { Agent, defineTool, pauseHere } = await import(`${dist}/index.js`);
const { mock } = await import(`${dist}/adapters/llm/MockProvider.js`);
const { bearer } = await import(`${dist}/identity/kinds.js`);

function capture(agent) { const events = []; agent.on('*', (e) => events.push({ seq: events.length, type: e.type, payload: e.payload, meta: e.meta })); return events; }

// Authorization consent: the provider answers authorization-required first, issued after consent.
async function consent(sessionId) {
  let consented = false;
  const credentials = { id: 'fixture-identity', async getCredential(req) {
    return consented ? { status: 'issued', credential: bearer('tok-fixture') }
                     : { status: 'authorization-required', authorizationUrl: 'https://idp.example/consent?state=s1', sessionId: 'idp-session-1' };
  } };
  const payInvoice = defineTool({ name: 'pay_invoice', description: 'Pay an invoice through the billing service',
    inputSchema: { type: 'object', properties: { invoice: { type: 'string' } }, required: ['invoice'] },
    needs: { credential: 'billing', mode: 'user' }, execute: async (args) => `paid ${args.invoice}` });
  const provider = mock({ replies: [
    { content: '', toolCalls: [{ id: 'op-5', name: 'pay_invoice', args: { invoice: 'INV-42' } }] },
    { content: 'Invoice INV-42 is paid.' } ] });
  const agent = Agent.create({ provider, model: 'mock', credentials }).tool(payInvoice).build();
  const events = capture(agent);
  const outcome = await agent.run({ message: 'pay invoice INV-42' }, { sessionId });
  const resumeStartsAtSeq = events.length;
  consented = true;
  const answer = await agent.resume(outcome.checkpoint, { approved: true, by: 'dana@billing' }, { sessionId });
  return { outcome, events, resumeStartsAtSeq, answer };
}

// Person takeover: the tool hands the browser to a person and pauses; on resume it takes it back.
async function takeover(sessionId) {
  const handovers = [];
  const session = { id: 'browser-session-1', liveViewEndpoint: 'wss://live.example/view',
    async handControlTo(driver) { handovers.push(driver); } };
  const finishLogin = defineTool({ name: 'finish_login', description: 'Let a person finish the login in the browser',
    inputSchema: { type: 'object', properties: { site: { type: 'string' } }, required: ['site'] },
    execute: async (args) => {
      await session.handControlTo('person');
      pauseHere({ question: `Finish the login on ${args.site}, then hand control back to the agent.`,
                  handControlTo: 'person', browserSessionId: session.id, liveViewEndpoint: session.liveViewEndpoint });
    } });
  const provider = mock({ replies: [
    { content: '', toolCalls: [{ id: 't3', name: 'finish_login', args: { site: 'portal.example' } }] },
    { content: 'Logged in; continuing on the page you left.' } ] });
  const agent = Agent.create({ provider, model: 'mock' }).tool(finishLogin).build();
  const events = capture(agent);
  const outcome = await agent.run({ message: 'sign in to the portal' }, { sessionId });
  const resumeStartsAtSeq = events.length;
  await session.handControlTo('agent');
  const answer = await agent.resume(outcome.checkpoint, { handControlTo: 'agent', by: 'sam@ops' }, { sessionId });
  return { outcome, events, resumeStartsAtSeq, answer, handovers };
}

const [which, sessionId, suffix] = process.argv.slice(2);
const r = which === 'consent' ? await consent(sessionId) : await takeover(sessionId);
const scenario = which === 'consent'
  ? `i-consent-${suffix}: a tool declaring needs {credential: billing, mode: user}; the credential provider answers authorization-required, then issued once the person consented; resumed with {sessionId}`
  : `i-takeover-${suffix}: a tool that hands its browser session to a person (handControlTo('person')) and pauses with pauseHere; resumed with {sessionId} after handControlTo('agent')`;
const { checkpoint, ...pauseOutcome } = r.outcome;
console.log(JSON.stringify({
  scenario,
  agentfootprintVersion: '9.62.0',
  resumeStartsAtSeq: r.resumeStartsAtSeq,
  pauseOutcome,
  checkpoint,
  answer: r.answer,
  events: r.events,
  ...(r.handovers && { handovers: r.handovers }),
}, null, 2));
