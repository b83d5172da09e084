"""Both clients where a review found them wrong: the Python client follows no redirect (its key
would go with it), the JS observer keeps a resume run in a fresh process whole and its batches
within the server's limit, and the documented resume loop (docs/api.md) resumes a question with its answer."""

import http.server
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from footprint_client import FootprintError

from tenancy.models import Project
from tenancy.services import agent_key_create

# The client package is put on sys.path by tests/clients/conftest.py, which also gives the fixtures.
from tests.clients.conftest import Client, client, secret  # noqa: F401
from tests.clients.test_client_retries_and_refs import _run_node, node_env  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "tests" / "data"


# --- Python client: a redirect is not followed, so the key never leaves -----------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        body = b'{"runId":"r"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_python_client_does_not_hand_its_key_to_another_origin_on_a_redirect() -> None:
    """urllib's default opener follows 301/302/303/307/308 to any host with every header but
    Content-*: a ledger behind an SSO proxy that redirects to its login host would have handed it
    `Authorization: Bearer afk_…` (and AF-Scope). The redirect is an error naming where it went."""

    class Target(_Recorder):
        seen: list[dict[str, str]] = []

    target = _serve(Target)

    class Redirector(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{target.server_port}/login")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    origin = _serve(Redirector)
    try:
        ledger = Client(f"http://127.0.0.1:{origin.server_port}", "afk_THE_SECRET_KEY", retries=0)
        with pytest.raises(FootprintError) as refused:
            ledger.run("run-1")
        assert refused.value.status == 302
        assert "redirected" in str(refused.value)
        assert Target.seen == []
    finally:
        origin.shutdown()
        target.shutdown()


# --- JS observer: a resume in a fresh process -------------------------------------------------


def _resume_part(name: str) -> list[dict[str, Any]]:
    capture = json.loads((DATA / name).read_text())
    return [{k: v for k, v in e.items() if k != "seq"} for e in capture["events"][capture["resumeStartsAtSeq"] :]]


def test_js_observer_attached_for_a_resume_does_not_lose_the_resumed_run(
    node_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A fresh agent in a new process resumes a stored checkpoint (the fixtures' README), and
    agentfootprint 9.62.0 emits `pause.resume` under `consumer-scope` before the resumed run's
    first event. Sent unfolded, the second such resume in a project reused `consumer-scope` seq 0
    with other content: 409 for the whole batch, the resumed run's events with it. Replayed: the
    resume halves of two real captures, each through its own fresh observer; both arrive whole."""
    approved = _resume_part("b-middleware/events-approved.json")
    declined = _resume_part("b-middleware/events-declined.json")
    result = _run_node(
        """
const captures = JSON.parse(process.env.CAPTURES);
const out = [];
for (const events of captures) {
  const agent = fakeAgent();   // a fresh process: a fresh agent and observer
  const errors = [];
  const observer = observerModule.attachFootprintObserver(agent, {
    url: URL_, key: KEY, onError: (e) => errors.push(`${e.status} ${e.detail?.code} ${e.message}`),
  });
  agent.emit(events);
  await observer.close().catch((e) => errors.push(`close: ${e.message}`));
  const runId = events.find((e) => e.meta.runId !== 'consumer-scope').meta.runId;
  const run = await fetch(`${URL_}/api/v1/runs/${runId}`, { headers: { authorization: `Bearer ${KEY}` } });
  out.push({ runId, errors, status: run.status, stored: run.status === 200 ? (await run.json()).events : 0,
             sent: events.filter((e) => e.meta.runId === runId).length });
}
console.log(JSON.stringify(out));
""",
        tmp_path,
        {**node_env, "CAPTURES": json.dumps([approved, declined])},
    )
    for run in result:
        assert run["errors"] == [], run
        assert run["status"] == 200, run
        assert run["stored"] >= run["sent"], run


# --- JS observer: batchSize above the server's 5,000 events ------------------------------------


def test_js_observer_keeps_a_batch_within_the_servers_event_limit(
    node_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The server refuses more than 5,000 events per request (413, never retried): a batchSize of
    10,000 lost a whole burst of 5,001 events. The observer splits at the server's limit."""
    result = _run_node(
        """
const agent = fakeAgent();
const errors = [];
const observer = observerModule.attachFootprintObserver(agent, {
  url: URL_, key: KEY, batchSize: 10000, onError: (e) => errors.push(`${e.status} ${e.message}`),
});
const events = [];
for (let i = 0; i < 5001; i++) events.push({ type: 'custom.note', payload: { i }, meta: { runId: 'js-big' } });
agent.emit(events);
await observer.close().catch((e) => errors.push(`close: ${e.message}`));
const run = await fetch(`${URL_}/api/v1/runs/js-big`, { headers: { authorization: `Bearer ${KEY}` } });
console.log(JSON.stringify({ errors, status: run.status, run: run.status === 200 ? await run.json() : null }));
""",
        tmp_path,
        node_env,
    )
    assert result["errors"] == []
    assert result["status"] == 200
    assert result["run"]["events"] == 5001


# --- docs/api.md: the pause/resume loop, run as written -------------------------------------------


def _documented_resume_loop() -> str:
    docs = (ROOT / "docs" / "api.md").read_text()
    section = docs.split("### JavaScript: the observer", 1)[1]
    code = re.search(r"```js\n(.*?)```", section, re.S)
    assert code is not None
    source = code.group(1)
    source = re.sub(r"^import \{(.*?)\} from .*?;$", r"const {\1} = observerModule;", source, flags=re.M)
    return source.replace("'https://ledger.example.com'", "URL_")


def test_documented_resume_loop_resumes_a_plain_ask_with_its_answer(
    node_env: dict[str, str],  # noqa: F811
    project: Project,
    tmp_path: Path,
) -> None:
    """Spec §2.4: a plain ask's resume input is the tool's result, so the loop must hand it
    `decision.answer`, not the decision. The loop is run verbatim from docs/api.md against a
    stand-in agent that applies §2.4's plain-ask rule; an integration answers "eu-west"."""
    decider = agent_key_create(project=project, scopes=["decide", "asks"])[1]
    script = (
        """
const DECIDER = process.env.DECIDER;
const toolResults = [];
const agent = {
  listener: null,
  on(type, fn) { agent.listener = fn; return () => { agent.listener = null; }; },
  async run(input) {
    const meta = { runId: 'readme-plain', wallClockMs: Date.now() };
    agent.listener({ type: 'agentfootprint.agent.turn_start', payload: { turnIndex: 0, userPrompt: input }, meta });
    const pauseData = { toolCallId: 'q1', toolName: 'ask_user', question: 'Which region?' };
    agent.listener({ type: 'agentfootprint.pause.request',
                     payload: { reason: 'stage requested pause', questionPayload: pauseData },
                     meta: { ...meta, runId: 'consumer-scope' } });
    return { paused: true, checkpoint: { pausedStageId: 'tool-calls', pauseData }, pauseData };
  },
  // spec §2.4, plain ask: undefined is refused; any other input IS the tool's result.
  async resume(checkpoint, input) {
    if (input === undefined) throw Object.assign(new Error('answer required'), { code: 'ERR_PAUSE_ANSWER_REQUIRED' });
    toolResults.push(input);
    return `the tool returned ${JSON.stringify(input)}`;
  },
};
const input = 'Where should I deploy?';
// A person answers in the inbox (here: an integration with a `decide` key) a moment later.
const decided = (async () => {
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    const list = await (await fetch(`${URL_}/api/v1/asks?status=open&run=readme-plain`,
      { headers: { authorization: `Bearer ${DECIDER}` } })).json();
    if (list.asks?.length) {
      const r = await fetch(`${URL_}/api/v1/asks/${list.asks[0].id}/decision`, {
        method: 'POST', headers: { authorization: `Bearer ${DECIDER}`, 'content-type': 'application/json' },
        body: JSON.stringify({ by: 'dana', value: 'eu-west' }) });
      return r.status;
    }
  }
})();
"""
        + _documented_resume_loop()
        + """
console.log(JSON.stringify({ decideStatus: await decided, toolResults }));
"""
    )
    result = _run_node(script, tmp_path, {**node_env, "DECIDER": decider})
    assert result["decideStatus"] == 200
    assert result["toolResults"] == ["eu-west"], f"the tool was resumed with {result['toolResults']}"
