"""The run waterfall: the span index built from a run's events, the windows read from it (spans when
few, buckets when many, never the whole run), the worker's pass, and the run page's default tab."""

import re
from itertools import islice

import pytest
from django.db import connection

from ledger.explorer import span_index, waterfall
from ledger.models import Run, RunSpan, RunSpanOverview
from tests.conftest import fixture_events
from tests.ledger.waterfall_runs import synthetic_run_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def declined_run(agent_client) -> str:
    events = fixture_events("b-middleware/events-declined.json")
    agent_client.ingest(events)
    return events[0]["meta"]["runId"]


def ingest(agent_client, events: list[dict], batch: int = 2000) -> None:
    for start in range(0, len(events), batch):
        response = agent_client.ingest(events[start : start + batch])
        assert response.status_code == 200, response.content


@pytest.fixture
def long_run(agent_client) -> Run:
    """200 iterations (2,200 events): more iterations, LLM and tool calls than a lane draws one by one."""
    ingest(agent_client, list(synthetic_run_events("long-run", iterations=200)))
    return Run.objects.get(run_id="long-run")


def page(project, run_id: str, query: str = "") -> str:
    return f"/projects/{project.slug}/runs/{run_id}/tab/waterfall/{query}"


# --- the index --------------------------------------------------------------------------------


def test_spans_pair_each_start_with_its_end(project, declined_run):
    run = Run.objects.get(run_id=declined_run)
    span_index.run_spans_build(run_pk=run.pk)
    spans = list(RunSpan.objects.filter(run=run).order_by("start_ms", "lane"))
    kinds = {span.kind for span in spans}
    assert {"turn", "iteration", "llm", "tool", "dispatch-step", "subflow", "refusal"} <= kinds
    assert all(span.end_ms >= span.start_ms >= 0 for span in spans)
    tools = [span for span in spans if span.kind == "tool"]
    assert len(tools) == 3
    assert any(span.label.startswith("transfer_funds (") for span in tools)
    # Each tool span runs from its tool_start to its tool_end.
    assert all(span.first_seq < span.last_seq for span in tools)
    refusals = [span for span in spans if span.kind == "refusal"]
    assert refusals
    assert all(span.refused for span in refusals)
    assert len(refusals) == run.refusal_count
    denied_steps = [span for span in spans if span.kind == "dispatch-step" and span.refused]
    assert any("frozen-accounts deny" in span.label for span in denied_steps)
    run.refresh_from_db()
    assert run.spans_indexed == run.chain_length


def test_a_rebuild_replaces_the_runs_spans_whole(project, declined_run):
    run = Run.objects.get(run_id=declined_run)
    first = span_index.run_spans_build(run_pk=run.pk)
    assert span_index.run_spans_build(run_pk=run.pk) == first
    assert RunSpan.objects.filter(run=run).count() == first
    assert RunSpanOverview.objects.filter(run=run).count() == 1


def test_a_span_still_open_ends_at_the_runs_last_event(agent_client, project):
    events = list(islice(synthetic_run_events("cut-short", iterations=3), 8))  # mid tool call
    ingest(agent_client, events)
    run = Run.objects.get(run_id="cut-short")
    span_index.run_spans_build(run_pk=run.pk)
    tool = RunSpan.objects.get(run=run, kind="tool")
    assert tool.label.endswith("(not ended)")
    assert tool.last_seq == events[-1]["seq"]


def test_overview_counts_every_span_in_fixed_buckets(long_run):
    span_index.run_spans_build(run_pk=long_run.pk)
    overview = RunSpanOverview.objects.get(run=long_run)
    lanes = {entry["label"]: entry["spans"] for entry in overview.lanes}
    assert lanes["iterations"] == 200
    assert lanes["tool calls"] == 200
    assert lanes["turns"] == 4
    assert lanes["refusals"] == 8  # every 25th call denied
    tool_buckets = overview.buckets[str(span_index.LANE_TOOLS)]
    assert len(tool_buckets) <= span_index.OVERVIEW_BUCKETS
    assert sum(cell[1] for cell in tool_buckets) == 200


# --- the worker's pass ------------------------------------------------------------------------


def test_the_pass_rebuilds_runs_whose_chain_grew(agent_client, project):
    events = list(synthetic_run_events("growing", iterations=10))
    ingest(agent_client, events[:40])
    assert span_index.run_spans_index_pending() == 1
    run = Run.objects.get(run_id="growing")
    assert run.spans_indexed == 40
    assert span_index.run_spans_index_pending() == 0  # nothing new
    ingest(agent_client, events[40:])
    assert span_index.run_spans_index_pending() == 1
    run.refresh_from_db()
    assert run.spans_indexed == run.chain_length == len(events)
    assert RunSpan.objects.filter(run=run, kind="iteration").count() == 10


def test_the_pass_does_nothing_while_another_holds_its_lock(agent_client, project):
    ingest(agent_client, list(synthetic_run_events("locked-out", iterations=2)))
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(hashtext(%s))", [span_index.ADVISORY_LOCK])
    try:
        # Another session's lock: the pass's own session is another connection (as a second worker's).
        from django.db import connections

        other = connections.create_connection("default")
        with other.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [span_index.ADVISORY_LOCK])
            assert cur.fetchone() == (False,)
        other.close()
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", [span_index.ADVISORY_LOCK])


def test_the_pass_is_scheduled_every_few_seconds(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["span-index"]
    assert entry["task"] == "ledger.tasks.run_spans_index_pending"
    assert entry["schedule"] == 5.0


# --- windows ----------------------------------------------------------------------------------


def _lane(chart: waterfall.Waterfall, label: str) -> waterfall.Lane:
    return next(lane for lane in chart.lanes if lane.label == label)


def test_a_run_never_indexed_is_built_when_its_waterfall_is_read(long_run):
    assert not RunSpanOverview.objects.filter(run=long_run).exists()
    chart = waterfall.run_waterfall(run=long_run)
    assert chart.indexed_length == long_run.chain_length
    assert chart.behind == 0


def test_the_whole_run_draws_dense_lanes_as_buckets_and_short_ones_as_spans(long_run):
    chart = waterfall.run_waterfall(run=long_run)
    assert chart.whole_run
    turns = _lane(chart, "turns")
    assert not turns.aggregated
    assert len(turns.bars) == 4
    assert all(bar.position is not None for bar in turns.bars)
    tools = _lane(chart, "tool calls")
    assert tools.aggregated
    assert tools.spans == 200
    assert 0 < len(tools.bars) <= waterfall.WINDOW_BUCKETS
    assert all(bar.zoom is not None and bar.zoom[0] < bar.zoom[1] for bar in tools.bars)
    assert all(0 <= bar.x <= waterfall.WIDTH and bar.x + bar.width <= waterfall.WIDTH + 0.1 for bar in tools.bars)
    refusals = _lane(chart, "refusals")
    assert not refusals.aggregated
    assert len(refusals.bars) == 8
    assert all(bar.refused for bar in refusals.bars)


def test_a_narrow_window_draws_the_spans_themselves(long_run):
    whole = waterfall.run_waterfall(run=long_run)
    # About five iterations' worth of the run.
    width = whole.duration_ms // 40
    start = whole.duration_ms * 6 // 10  # within the third turn (iterations 100 to 149)
    chart = waterfall.run_waterfall(run=long_run, from_ms=start, to_ms=start + width)
    assert not any(lane.aggregated for lane in chart.lanes)
    tools = _lane(chart, "tool calls")
    assert 3 <= tools.spans <= 8
    assert all(bar.position is not None and "lookup_order" in bar.title for bar in tools.bars)
    # A span that began before the window is cut at its left edge, not drawn before it.
    assert _lane(chart, "turns").bars[0].x == 0


def test_a_window_never_draws_more_than_its_cap_per_lane(agent_client, project):
    ingest(agent_client, list(synthetic_run_events("dense", iterations=600, iterations_per_turn=600)), batch=3000)
    run = Run.objects.get(run_id="dense")
    whole = waterfall.run_waterfall(run=run)
    chart = waterfall.run_waterfall(run=run, from_ms=whole.duration_ms // 4, to_ms=whole.duration_ms // 4 * 3)
    for lane in chart.lanes:
        assert len(lane.bars) <= max(waterfall.LANE_SPANS_SHOWN, waterfall.WINDOW_BUCKETS)
    steps = _lane(chart, "dispatch steps")
    assert steps.aggregated
    assert steps.spans > waterfall.LANE_SPANS_SHOWN
    assert sum(int(re.match(r"\d+", bar.title).group()) for bar in steps.bars) == steps.spans


@pytest.fixture
def dense_run(agent_client) -> Run:
    """600 iterations in one turn: 1,200 dispatch steps, enough for two levels of cells."""
    ingest(agent_client, list(synthetic_run_events("dense", iterations=600, iterations_per_turn=600)), batch=3000)
    run = Run.objects.get(run_id="dense")
    span_index.run_spans_build(run_pk=run.pk)
    return run


def test_each_level_of_cells_counts_every_span_of_its_lane_once(dense_run):
    from ledger.models import RunSpanCell

    overview = RunSpanOverview.objects.get(run=dense_run)
    levels = {entry["lane"]: entry["levels"] for entry in overview.lanes}
    assert levels[span_index.LANE_STEPS] == 2  # 1,200 spans: 120 and 480 cells
    assert levels[span_index.LANE_TURNS] == 0  # one span: its windows count it
    for lane, count in levels.items():
        starts = list(RunSpan.objects.filter(run=dense_run, lane=lane).values_list("start_ms", "refused"))
        for level in range(count):
            expected: dict[int, list[int]] = {}
            for start, refused in starts:
                cell = expected.setdefault(span_index.cell_of(start, overview.duration_ms, level), [0, 0])
                cell[0] += 1
                cell[1] += int(refused)
            stored = RunSpanCell.objects.filter(run=dense_run, lane=lane, level=level)
            assert {c.cell: [c.spans, c.refused] for c in stored} == expected, (lane, level)


def test_a_zoom_into_a_dense_lane_reads_its_cells_not_its_spans(dense_run):
    from django.test.utils import CaptureQueriesContext

    duration = RunSpanOverview.objects.get(run=dense_run).duration_ms
    start, end = duration // 4, duration // 2 - 1  # just under a quarter of the run: the cells of level 1
    assert waterfall._cell_level(duration, end - start) == 1
    with CaptureQueriesContext(connection) as queries:
        chart = waterfall.run_waterfall(run=dense_run, from_ms=start, to_ms=end)
    assert any("ledger_runspancell" in q["sql"] for q in queries)
    steps = _lane(chart, "dispatch steps")
    assert steps.aggregated
    cells_shown = span_index.CELL_SPLIT * waterfall.WINDOW_BUCKETS // 16
    assert cells_shown // waterfall.MERGED_CELLS <= len(steps.bars) <= waterfall.WINDOW_BUCKETS + 1
    first, last = (span_index.cell_of(ms, duration, 1) for ms in (start, end))
    behind = [
        s
        for s in RunSpan.objects.filter(run=dense_run, lane=span_index.LANE_STEPS).values_list("start_ms", flat=True)
        if first <= span_index.cell_of(s, duration, 1) <= last
    ]
    assert steps.spans == len(behind) == sum(int(re.match(r"\d+", bar.title).group()) for bar in steps.bars)
    # Each bar zooms into its own cells (at most MERGED_CELLS of them), and sits inside the window.
    widest = waterfall.MERGED_CELLS * duration / 480 + 2
    assert all(bar.zoom is not None and bar.zoom[1] - bar.zoom[0] <= widest for bar in steps.bars)
    assert all(bar.x >= 0 and bar.x + bar.width <= waterfall.WIDTH + 0.1 for bar in steps.bars)


def test_a_run_indexed_before_the_cells_is_counted_from_its_spans(dense_run):
    from ledger.models import RunSpanCell

    whole = RunSpanOverview.objects.get(run=dense_run)
    before = waterfall.run_waterfall(run=dense_run, from_ms=whole.duration_ms // 4, to_ms=whole.duration_ms // 2)
    RunSpanCell.objects.filter(run=dense_run).delete()
    whole.lanes = [{k: v for k, v in entry.items() if k != "levels"} for entry in whole.lanes]
    whole.save()
    after = waterfall.run_waterfall(run=dense_run, from_ms=whole.duration_ms // 4, to_ms=whole.duration_ms // 2)
    assert _lane(after, "dispatch steps").aggregated
    start, end = after.from_ms, after.to_ms
    in_window = RunSpan.objects.filter(run=dense_run, lane=span_index.LANE_STEPS, start_ms__lte=end, end_ms__gte=start)
    assert _lane(after, "dispatch steps").spans == in_window.count()
    # The cells count whole cells at the window's edges: a few spans more, never fewer.
    assert in_window.count() <= _lane(before, "dispatch steps").spans <= in_window.count() + 20


def test_a_window_outside_the_run_is_clamped_to_it(long_run):
    whole = waterfall.run_waterfall(run=long_run)
    chart = waterfall.run_waterfall(run=long_run, from_ms=-500, to_ms=whole.duration_ms * 10)
    assert (chart.from_ms, chart.to_ms) == (0, whole.duration_ms)
    tiny = waterfall.run_waterfall(run=long_run, from_ms=100, to_ms=100)
    assert tiny.to_ms - tiny.from_ms == waterfall.NARROWEST_WINDOW_MS
    assert not tiny.can_zoom_in


def test_zoom_and_pan_stay_inside_the_run(long_run):
    whole = waterfall.run_waterfall(run=long_run)
    chart = waterfall.run_waterfall(run=long_run, from_ms=0, to_ms=whole.duration_ms // 8)
    assert chart.zoom_in[1] - chart.zoom_in[0] == pytest.approx((chart.to_ms - chart.from_ms) / 2, abs=1)
    assert chart.zoom_out[0] == 0
    assert chart.earlier[0] == 0
    later = chart.later
    assert later[0] > chart.from_ms
    assert later[1] <= whole.duration_ms


def test_a_run_grown_a_little_is_rebuilt_when_read(agent_client, long_run):
    waterfall.run_waterfall(run=long_run)
    more = list(synthetic_run_events("long-run", iterations=201))[long_run.chain_length :]
    ingest(agent_client, more)
    long_run.refresh_from_db()
    chart = waterfall.run_waterfall(run=long_run)
    assert chart.behind == 0
    assert _lane(chart, "iterations").spans == 201


def test_a_run_far_behind_is_left_to_the_worker_and_says_so(agent_client, long_run, monkeypatch):
    waterfall.run_waterfall(run=long_run)
    monkeypatch.setattr(waterfall, "BUILD_ON_PAGE_RECORDS", 5)
    more = list(synthetic_run_events("long-run", iterations=202))[long_run.chain_length :]
    ingest(agent_client, more)
    long_run.refresh_from_db()
    chart = waterfall.run_waterfall(run=long_run)
    assert chart.behind == len(more)


# --- the page ---------------------------------------------------------------------------------


def test_the_waterfall_is_the_run_pages_default_tab(auditor_client, project, declined_run):
    html = auditor_client.get(f"/projects/{project.slug}/runs/{declined_run}/").content.decode()
    assert 'id="waterfall"' in html
    assert 'aria-current="page">Waterfall</a>' in html
    # Without JavaScript the tab reads as the timeline table.
    noscript = html[html.index("<noscript>") : html.index("</noscript>")]
    assert 'class="event-row"' in noscript
    assert "/static/css/waterfall.css" in html
    assert "/static/js/waterfall.js" in html
    assert "style=" not in html[html.index('id="waterfall"') : html.index("<noscript>")]


def test_a_span_links_to_its_event_and_a_bucket_to_its_window(auditor_client, project, long_run):
    html = auditor_client.get(page(project, long_run.run_id)).content.decode()
    events = re.findall(r'<a href="([^"]+)" data-waterfall="event"><rect class="bar k-turn', html)
    assert len(events) == 4
    assert all(re.fullmatch(rf"/projects/{project.slug}/runs/long-run/events/\d+/", href) for href in events)
    zooms = re.findall(r'<a href="[^"]+\?from=(\d+)&amp;to=(\d+)" data-waterfall="zoom">', html)
    assert zooms
    assert all(int(start) < int(end) for start, end in zooms)
    assert "<title>8 refusals" not in html  # refusals are few: drawn one by one
    assert html.count('class="bar k-refusal refused"') == 8


def test_the_event_a_span_opens_is_its_first(auditor_client, project, declined_run):
    html = auditor_client.get(page(project, declined_run)).content.decode()
    href = re.search(r'<a href="([^"]+)" data-waterfall="event"><rect class="bar k-tool', html).group(1)
    drawer = auditor_client.get(href, headers={"HX-Request": "true"}).content.decode()
    assert "stream.tool_start" in drawer


def test_a_zoom_asked_by_htmx_is_only_the_chart(auditor_client, project, long_run):
    response = auditor_client.get(
        page(project, long_run.run_id, "?from=0&to=300"), headers={"HX-Request": "true", "HX-Target": "waterfall"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="waterfall"')
    assert "<noscript>" not in html
    assert "Whole run</a>" in html
    assert "HX-Target" in response.headers["Vary"]


def test_the_window_is_shown_in_human_durations(auditor_client, project, long_run):
    html = auditor_client.get(page(project, long_run.run_id, "?from=1000&to=2000")).content.decode()
    assert "1 s to 2 s of 14 s" in html


@pytest.mark.parametrize("query", ["?from=soon", "?to=1.5"])
def test_a_window_that_is_not_whole_milliseconds_is_refused_by_name(auditor_client, project, long_run, query):
    response = auditor_client.get(page(project, long_run.run_id, query))
    assert response.status_code == 400
    name = query[1:].split("=")[0]
    assert f"The waterfall's '{name}' must be a whole number of milliseconds".encode() in response.content


def test_an_empty_window_says_why(auditor_client, project, agent_client):
    events = [e for e in fixture_events("b-middleware/events-declined.json") if "context" in e["type"]][:2]
    for seq, event in enumerate(events):
        event["seq"] = seq
    ingest(agent_client, events)
    run_id = events[0]["meta"]["runId"]
    html = auditor_client.get(page(project, run_id)).content.decode()
    assert 'class="waterfall-grid"' in html  # the context subflow is drawn
    html = auditor_client.get(page(project, run_id, "?from=100000&to=200000")).content.decode()
    assert "Nothing to draw in this window" in html or 'class="waterfall-grid"' in html


def test_the_page_reads_a_bounded_number_of_queries(auditor_client, project, long_run, django_assert_max_num_queries):
    auditor_client.get(page(project, long_run.run_id))  # indexed on first read
    with django_assert_max_num_queries(22):
        assert auditor_client.get(page(project, long_run.run_id)).status_code == 200
    with django_assert_max_num_queries(12):
        response = auditor_client.get(
            page(project, long_run.run_id, "?from=0&to=2000"), headers={"HX-Request": "true", "HX-Target": "waterfall"}
        )
        assert response.status_code == 200


def test_another_projects_run_has_no_waterfall(outsider_client, project, declined_run):
    assert outsider_client.get(page(project, declined_run)).status_code == 404


def _parallel_run_events(run_id: str) -> list[dict]:
    """A Parallel composition `research` of two agents, `web` and `docs`, whose LLM calls
    interleave: web starts first, docs starts, web ends, docs ends; docs completes after web."""
    clock = 1_796_043_000_000
    events = []

    def event(event_type: str, payload: dict, path: list[str], step: int = 10) -> None:
        nonlocal clock
        clock += step
        meta = {"runId": run_id, "wallClockMs": clock, "runOffsetMs": 0, "compositionPath": path, "subflowPath": []}
        events.append({"seq": len(events), "type": f"agentfootprint.{event_type}", "payload": payload, "meta": meta})

    root = ["Sequence:pipeline"]
    web, docs = [*root, "Parallel:research", "Agent:web"], [*root, "Parallel:research", "Agent:docs"]
    event("agent.turn_start", {"turnIndex": 0, "userPrompt": "compare"}, root)
    event("composition.enter", {"kind": "Parallel", "id": "research", "name": "research", "childCount": 2}, root)
    branches = [{"id": "web", "name": "web search"}, {"id": "docs", "name": "internal docs"}]
    event("composition.fork_start", {"parentId": "research", "branches": branches}, [*root, "Parallel:research"])
    event("stream.llm_start", {"iteration": 0, "model": "web-model"}, web)
    event("stream.llm_start", {"iteration": 0, "model": "docs-model"}, docs)
    event("stream.llm_end", {"iteration": 0, "content": "web says"}, web, step=100)
    event("composition.branch_complete", {"parentId": "research", "branchId": "web", "status": "ok"}, web)
    event("stream.llm_end", {"iteration": 0, "content": "docs say"}, docs, step=300)
    event("composition.merge_end", {"parentId": "research", "strategy": "fn", "mergedBranchCount": 2}, root)
    event("agent.turn_end", {"turnIndex": 0, "finalContent": "done"}, root)
    return events


def test_parallel_branches_each_get_their_own_lane(agent_client, project, auditor_client):
    ingest(agent_client, _parallel_run_events("parallel"))
    run = Run.objects.get(run_id="parallel")
    chart = waterfall.run_waterfall(run=run)
    branch_lanes = [lane for lane in chart.lanes if lane.label.startswith("branch ")]
    assert [lane.label for lane in branch_lanes] == [
        "branch web search of research",
        "branch internal docs of research",
    ]
    assert len({lane.number for lane in branch_lanes}) == 2
    web, docs = (RunSpan.objects.get(run=run, kind="branch", lane=lane.number) for lane in branch_lanes)
    # web: from its first event (seq 3) to its completion (seq 6); docs: seq 4 to its last event (seq 7).
    assert (web.first_seq, web.last_seq) == (3, 6)
    assert (docs.first_seq, docs.last_seq) == (4, 7)
    assert web.start_ms < docs.start_ms < web.end_ms < docs.end_ms
    # Each branch's LLM call ends its own start, though the calls overlap.
    llm = {span.label: (span.first_seq, span.last_seq) for span in RunSpan.objects.filter(run=run, kind="llm")}
    assert llm == {"LLM call web-model": (3, 5), "LLM call docs-model": (4, 7)}
    html = auditor_client.get(page(project, "parallel")).content.decode()
    assert "branch web search of research" in html
    assert 'class="bar k-branch' in html


def test_neighbouring_buckets_of_one_shade_are_one_bar_of_at_most_eight_cells():
    # (bucket, spans, refused): ten alike, a gap, a busier one, two with refusals.
    cells = [(n, 5, 0) for n in range(10)] + [(11, 5, 0), (12, 40, 0), (13, 5, 1), (14, 5, 2)]
    merged = waterfall._merged_cells(cells, busiest=40)
    assert merged == [
        (0, 7, 40, 0, 1),  # eight cells at most
        (8, 9, 10, 0, 1),
        (11, 11, 5, 0, 1),  # not next to bucket 9
        (12, 12, 40, 0, 4),  # another shade
        (13, 14, 10, 3, 1),  # refusals are not merged with cells without any
    ]
    assert sum(spans for _, _, spans, _, _ in merged) == sum(spans for _, spans, _ in cells)


def test_subflows_past_the_lanes_given_share_the_last_one():
    # One event in each of SUBFLOW_LANES + 2 subflows in turn, then one outside any.
    names = [f"sf-{n}" for n in range(span_index.SUBFLOW_LANES + 2)] + [None]
    events = iter(
        (position, position, "agentfootprint.context.injected", None, 1_000 + position, name, None, None, None)
        for position, name in enumerate(names)
    )
    built = span_index.spans_from_events(events, {})
    subflow_rows = [row for row in built.rows if row[1] == RunSpan.Kind.SUBFLOW]
    lanes_used = [row[0] for row in subflow_rows]
    first, count = span_index.FIRST_SUBFLOW_LANE, span_index.SUBFLOW_LANES
    assert lanes_used == [*range(first, first + count - 1), first + count - 1, first + count - 1, first + count - 1]
    assert built.lanes[first] == "subflow sf-0"
    assert built.lanes[first + count - 1] == "other subflows"
