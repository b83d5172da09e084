"""Pages that read like a product: times and sizes for people, the server's own records listed with
the events, a run's audit bundle from its page, tables that fold into cards on a phone."""

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.test import Client

from ledger.models import Run
from ledger.refusals import views as refusal_views
from tests.conftest import ApiClient, load_fixture, numbered_per_run
from tests.ledger.ask_helpers import B_RUN, decide, open_ask

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# What a page must never show: an epoch in milliseconds (13 digits from 2001 to 2286) or a
# count of milliseconds printed as a bare number.
EPOCH_MS = re.compile(r"(?<![\w.#-])1\d{12}(?![\w.])")
RAW_MS = re.compile(r"\b\d{4,} ms\b")
ROW = re.compile(r'<tr class="event-row( by-server)?">(.*?)</tr>', re.S)


@pytest.fixture
def decided_run(agent_client: ApiClient, integration_client: ApiClient) -> Run:
    """Scenario b's run, paused on an ask, and a person's decision the server chained to it."""
    capture = load_fixture("b-middleware/events-declined.json")
    assert agent_client.ingest(numbered_per_run(capture["events"][: capture["resumeStartsAtSeq"]])).status_code == 200
    ask_id = open_ask(agent_client, status=200)["id"]
    assert decide(integration_client, ask_id, approved=False, by="dana", note="no PO").status_code == 200
    return Run.objects.get(run_id=B_RUN)


def _page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_no_template_formats_a_moment_or_a_duration_by_hand() -> None:
    """Moments go through `when`/`when_ms`, durations through `duration`/`duration_ms`, sizes
    through `filesizeformat`: one way, so every page reads the same."""
    offenders = []
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        for pattern in (r'\|date:"', r"\|naturaltime", r"\|from_ms", r"_ms \}\} ?ms", r"bytes \}\} bytes"):
            offenders += [f"{path.relative_to(TEMPLATES)}: {pattern}" for _ in re.finditer(pattern, text)]
    assert offenders == []


def test_run_page_shows_times_for_people_not_epoch_numbers(auditor_client: Client, decided_run: Run) -> None:
    url = f"/projects/acme/runs/{B_RUN}/"

    page = _page(auditor_client, url)

    assert "<time datetime=" in page
    assert "data-when" in page
    assert not EPOCH_MS.findall(page.replace(B_RUN, "")), EPOCH_MS.findall(page.replace(B_RUN, ""))[:5]
    assert not RAW_MS.findall(page)
    # timeline times are offsets from the run's first event, the moment itself on hover
    first = ROW.search(page)
    assert first
    hover = r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" data-when>\+0 ms</time>'
    assert re.search(hover, first.group(2))


def test_timeline_lists_the_servers_decision_with_the_events_so_the_counts_agree(
    auditor_client: Client, decided_run: Run
) -> None:
    page = _page(auditor_client, f"/projects/acme/runs/{B_RUN}/")
    rows = ROW.findall(page)
    while 'class="more"' in page and (later := re.search(r'hx-get="([^"]+\?after_seq=\d+)"', page)):
        page = _page(auditor_client, later.group(1).replace("&amp;", "&"))
        rows += ROW.findall(page)

    assert len(rows) == decided_run.chain_length == decided_run.event_count + 1
    server_rows = [cells for by_server, cells in rows if by_server]
    assert len(server_rows) == 1
    assert 'class="tag server-tag"' in server_rows[0]
    assert "ledger.human_decision" in server_rows[0]
    # listed after the agent's event chained before it: here, the last one received
    assert rows[-1][0] == " by-server"


def test_timeline_places_a_decision_between_the_events_around_it_on_any_page(
    agent_client: ApiClient, auditor_client: Client, decided_run: Run
) -> None:
    later = {
        "seq": decided_run.max_seq + 1,
        "type": "agentfootprint.agent.turn_end",
        "payload": {},
        "meta": {"runId": B_RUN},
    }
    assert agent_client.ingest([later]).status_code == 200
    events_url = f"/projects/acme/runs/{B_RUN}/events/"

    last_page = _page(auditor_client, f"{events_url}?after_seq={decided_run.max_seq - 1}")

    types = re.findall(r"<td><code>([\w.]+)</code></td>", last_page)
    assert types == [types[0], "ledger.human_decision", "agent.turn_end"]


def test_an_auditor_downloads_the_runs_audit_bundle_the_api_gives(
    auditor_client: Client, agent_client: ApiClient, decided_run: Run
) -> None:
    page = _page(auditor_client, f"/projects/acme/runs/{B_RUN}/")
    link = re.search(r'<a href="([^"]+)" download class="run-bundle">', page)
    assert link is not None

    response = auditor_client.get(link.group(1))
    api = agent_client.get(f"/api/v1/runs/{B_RUN}/audit-bundle")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="{B_RUN}.audit.json"'
    downloaded, given = orjson.loads(response.content), orjson.loads(api.content)
    # the same bundle, byte for byte, but for the moment each was exported
    assert downloaded["header"].pop("exportedAt") <= given["header"].pop("exportedAt")
    assert downloaded == given
    assert downloaded["header"]["recordCount"] == decided_run.chain_length + 1


def test_the_bundle_download_of_another_projects_run_is_a_404(outsider_client: Client, decided_run: Run) -> None:
    assert outsider_client.get(f"/projects/acme/runs/{B_RUN}/audit-bundle/").status_code == 404


def test_inbox_rows_name_each_cell_for_a_phone(approver_client: Client, agent_client: ApiClient) -> None:
    capture = load_fixture("b-middleware/events-declined.json")
    agent_client.ingest(numbered_per_run(capture["events"][: capture["resumeStartsAtSeq"]]))
    open_ask(agent_client, status=200)

    page = _page(approver_client, "/inbox/")

    assert '<table class="asks cards">' in page
    row = re.search(r'<tr class="ask-row"[^>]*>(.*?)</tr>', page, re.S)
    assert row is not None
    labels = re.findall(r'data-label="([^"]+)"', row.group(1))
    assert labels == ["Asked", "Project", "Kind", "Tool", "Run", "Deadline"]
    assert '<td class="primary">' in row.group(1)


def test_empty_inbox_says_why(approver_client: Client) -> None:
    page = _page(approver_client, "/inbox/")

    assert "Nothing is waiting for you." in page
    assert "pauses for a person" in page


def _deny(run_id: str, seq: int, wall_clock_ms: int | None, rule: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id}
    if wall_clock_ms is not None:
        meta["wallClockMs"] = wall_clock_ms
    payload = {"middleware": rule, "moment": "before-tool", "outcome": "deny", "why": f"refused by {rule}"}
    return {"seq": seq, "type": "agentfootprint.middleware.decision", "payload": payload, "meta": meta}


REFUSAL_RULES = re.compile(r'<tr class="refusal-row">.*?<td>([\w-]+)</td>\s*<td>refused by', re.S)


def test_refusals_are_listed_in_time_order_not_the_order_they_arrived(
    auditor_client: Client, agent_client: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = 1_796_000_000_000
    # Sent in this order; each run's batch arrives after the last, but happened earlier.
    for run_id, wall, rule in (
        ("run-late", base + 30_000, "third"),
        ("run-early", base + 10_000, "first"),
        ("run-unclocked", None, "unclocked"),
        ("run-middle", base + 20_000, "second"),
    ):
        assert agent_client.ingest([_deny(run_id, 0, wall, rule)]).status_code == 200

    page = _page(auditor_client, "/refusals/")
    assert REFUSAL_RULES.findall(page) == ["third", "second", "first", "unclocked"]

    # paged one at a time, the cursor carries the time and the id: nothing repeats or goes missing
    monkeypatch.setattr(refusal_views, "REFUSALS_PER_PAGE", 1)
    seen, url = [], "/refusals/"
    while url:
        page = _page(auditor_client, url)
        seen += REFUSAL_RULES.findall(page)
        older = re.search(r'<tr class="more"><td colspan="8">\s*<a href="(\?[^"]+)"', page)
        url = "/refusals/" + older.group(1).replace("&amp;", "&") if older else ""
    assert seen == ["third", "second", "first", "unclocked"]


def test_a_filtered_empty_list_says_nothing_matches_and_links_to_clear_it(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    assert agent_client.ingest([_deny("run-1", 0, 1_796_000_000_000, "rule")]).status_code == 200

    runs = _page(auditor_client, "/runs/?status=failed")
    refusals = _page(auditor_client, "/refusals/?rule=no-such-rule")
    artifacts = _page(auditor_client, "/projects/acme/artifacts/?kind=no-such-kind")

    assert "No runs match these filters." in runs
    assert '<a href="/runs/" class="clear-filters">Clear the filters</a>' in runs
    assert "No runs yet" not in runs
    assert "No refusals match these filters." in refusals
    assert '<a href="/refusals/" class="clear-filters">Clear the filters</a>' in refusals
    assert "No artifacts match these filters." in artifacts
    assert '<a href="/projects/acme/artifacts/" class="clear-filters">Clear the filters</a>' in artifacts


def test_an_empty_list_with_no_filters_says_there_is_nothing_yet(auditor_client: Client) -> None:
    assert "No runs yet." in _page(auditor_client, "/runs/")
    assert "No refusals yet." in _page(auditor_client, "/refusals/")
    assert "No live artifacts." in _page(auditor_client, "/projects/acme/artifacts/")


def test_the_filter_form_is_rendered_from_the_url(auditor_client: Client) -> None:
    """What a history restore without a cached snapshot, or a shared link, shows: the form as filtered."""
    page = _page(auditor_client, "/runs/?status=failed&tool=lookup&has_refusals=on")

    start = page.index('<form method="get"')
    form = page[start : page.index("</form>", start)]
    assert "data-filters" in form
    assert '<option value="failed" selected>' in form
    assert 'name="tool" value="lookup"' in form
    assert re.search(r'<input type="checkbox" name="has_refusals"[^>]* checked>', form)


def test_the_admin_spells_model_names_right(admin_client: Client) -> None:
    page = _page(admin_client, "/admin/")

    assert "Webhook deliveries" in page
    assert "deliverys" not in page.lower()


def test_the_retention_form_takes_and_shows_durations_and_sizes_not_milliseconds(
    django_user_model: Any, project: Any
) -> None:
    from tenancy.models import Membership
    from tests.conftest import person, signed_in_client

    admin = signed_in_client(person(django_user_model, "ada", project, Membership.Role.ADMIN))
    url = "/projects/acme/artifacts/retention/"
    data = {"ttl_ms": "7 d", "max_ttl_ms": "30 d", "max_bytes_per_scope": "10 MB", "max_count_per_scope": ""}

    assert admin.post(url, data).status_code == 302

    project.artifact_store.refresh_from_db()
    store = project.artifact_store
    assert (store.ttl_ms, store.max_ttl_ms, store.max_bytes_per_scope) == (604_800_000, 2_592_000_000, 10 * 1024**2)
    form = _page(admin, url)
    assert 'value="7 d"' in form
    assert 'value="10 MB"' in form
    assert "(ms)" not in form
    listing = _page(admin, "/projects/acme/artifacts/")
    assert "kept 7 d 00 h" in listing
    assert "604800000" not in listing

    refused = admin.post(url, {**data, "ttl_ms": "7 weeks"})
    assert refused.status_code == 422
    assert "Write an amount with its unit" in refused.content.decode()
