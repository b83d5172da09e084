"""The overview's charts, drawn on the server as SVG: no script, no inline style (the CSP forbids
both), colours from classes in static/css/overview.css so light and dark mode both read well.

Every mark is a link to the runs or refusals behind it and carries a <title> (its hover text and
its name for screen readers); every chart also has a table with the same figures and links.
"""

import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeAlias
from urllib.parse import urlencode

from django.urls import get_script_prefix, reverse

from ledger.overview.selectors import Overview

WIDTH = 600  # the SVG's own units; it is scaled to the page's width
HEIGHT = 140
GAP = 0.2  # of a column's width, between columns
MAX_BAR = 40  # a few days' columns stay columns, not blocks


# A page's links, marks and table cells: slotted and not frozen, as a busy window makes hundreds
# of each and a frozen dataclass is built field by field through object.__setattr__ (about three
# times the time). Nothing changes them once a chart is built.
@dataclass(slots=True)
class Link:
    href: str
    title: str  # in UTC words; pages.js writes the period again in the reader's time zone
    # What the link is for ("Runs started") and its period, for that rewrite; none for a link
    # that is not about a period.
    subject: str = ""
    start: datetime | None = None
    end: datetime | None = None


@functools.lru_cache(maxsize=1024)  # a column's two instants are in each of its series' links
def _query_instant(at: datetime) -> str:
    """The instant as the list pages' filters read it (2026-03-04T05:06:00Z), written as urlencode
    would write it into a query (each colon as %3A), without its cost."""
    return at.strftime("%Y-%m-%dT%H%%3A%M%%3A%SZ")


@dataclass(frozen=True)
class PeriodLinks:
    """The links of one series' marks: a list page filtered to what the series counts and to the
    mark's period. The path and the series' own filters are encoded once, each period's two instants
    are written in: a busy window has hundreds of marks, and encoding every link's whole query
    was most of the time spent drawing them."""

    prefix: str  # path, "?" and the period's first parameter, up to its value
    until: str  # "&" and the period's second parameter, up to its value
    rest: str  # "&" and the series' own filters, encoded; "" when it has none
    title: str  # the words before the period's ("Runs now failed, ended ")
    subject: str

    def __call__(self, start: datetime, end: datetime) -> Link:
        href = f"{self.prefix}{_query_instant(start)}{self.until}{_query_instant(end)}{self.rest}"
        return Link(href, self.title + period_label(start, end), self.subject, start, end)


@dataclass(slots=True)  # as Link
class Mark:
    x: float
    y: float
    width: float
    height: float
    css: str
    link: Link


@dataclass(frozen=True)
class Series:
    key: str
    label: str
    css: str
    counts: list[int]
    link: PeriodLinks  # the link of a column's mark, from its period


@dataclass(slots=True)  # as Link
class Cell:
    value: int
    link: Link | None


@dataclass(slots=True)  # as Link
class Row:
    label: str
    cells: list[Cell]
    start: datetime
    end: datetime


@dataclass
class ColumnChart:
    """Stacked columns over time, a column per period of the window."""

    id: str
    title: str
    unit: str  # what one count is, for the axis note ("runs", "events")
    series: list[Series]
    buckets: list[datetime]
    step: timedelta
    empty_reason: str
    marks: list[Mark] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    top: int = 0

    def __post_init__(self) -> None:
        self.series = [series for series in self.series if any(series.counts)]
        totals = [sum(counts) for counts in zip(*(series.counts for series in self.series), strict=True)]
        self.top = max(totals, default=0)
        if not self.top:
            return
        column = WIDTH / len(self.buckets)
        bar = min(column * (1 - GAP), MAX_BAR)
        width = round(bar, 2)
        for i, (start, total) in enumerate(zip(self.buckets, totals, strict=True)):
            if not total:
                continue
            end = start + self.step
            x = round(i * column + (column - bar) / 2, 2)
            stacked = 0
            cells = []
            for series in self.series:
                count = series.counts[i]
                if not count:
                    cells.append(Cell(count, None))
                    continue
                link = series.link(start, end)  # once, for the mark and its table cell
                cells.append(Cell(count, link))
                height = count / self.top * HEIGHT
                y = HEIGHT - (stacked + count) / self.top * HEIGHT
                self.marks.append(
                    Mark(x=x, y=round(y, 2), width=width, height=round(max(height, 1.0), 2), css=series.css, link=link)
                )
                stacked += count
            self.rows.append(Row(label=period_label(start, end), cells=cells, start=start, end=end))

    @property
    def is_empty(self) -> bool:
        return not self.top

    @property
    def width(self) -> int:
        return WIDTH

    @property
    def height(self) -> int:
        return HEIGHT

    @property
    def first_label(self) -> str:
        return _moment(self.buckets[0])

    @property
    def last_label(self) -> str:
        return _moment(self.buckets[-1] + self.step) if self.buckets else ""

    @property
    def until(self) -> datetime | None:
        """The end of the last column (the axis' right end)."""
        return self.buckets[-1] + self.step if self.buckets else None

    @property
    def per(self) -> str:
        return _step_name(self.step)


@dataclass(frozen=True)
class Ranked:
    label: str
    value: int
    link: Link
    also: list[tuple[str, int, Link | None]] = field(default_factory=list)


@dataclass
class RankedChart:
    """The things with the most of something, as bars (<meter>s, which need no style) with figures."""

    id: str
    title: str
    heading: str  # the value's column
    items: list[Ranked]
    empty_reason: str
    also_headings: list[str] = field(default_factory=list)

    @property
    def top(self) -> int:
        return max((item.value for item in self.items), default=0)

    @property
    def is_empty(self) -> bool:
        return not self.items


def _moment(at: datetime) -> str:
    return at.strftime("%d %b %H:%M UTC")


@functools.lru_cache(maxsize=4096)  # a page names each of its periods in several links
def period_label(start: datetime, end: datetime) -> str:
    if end - start >= timedelta(days=1):
        return start.strftime("%a %d %b")
    return f"{start:%d %b %H:%M} to {end:%H:%M} UTC"


def _step_name(step: timedelta) -> str:
    if step >= timedelta(days=1):
        return "day"
    if step >= timedelta(hours=2):
        return f"{int(step.total_seconds() // 3600)} hours"
    if step >= timedelta(hours=1):
        return "hour"
    return "minute"


def _url(name: str, period: str = "", **query: object) -> str:
    """A list page's URL filtered by `query`, then by `period` (already encoded, as _encoded_period
    writes it: a chart's items share their window's)."""
    kept = {key: value for key, value in query.items() if value not in (None, "")}
    encoded = "&".join(part for part in (urlencode(kept), period) if part)
    return _path(name, get_script_prefix()) + ("?" + encoded if encoded else "")


def _encoded_period(first: str, second: str, since: datetime, until: datetime) -> str:
    return f"{first}={_query_instant(since)}&{second}={_query_instant(until)}"


@functools.lru_cache(maxsize=64)
def _path(name: str, script_prefix: str) -> str:
    """A list page's path (the same for every link to it under one script prefix)."""
    return reverse(name)


def _period_links(name: str, period: tuple[str, str], title: str, subject: str, **query: object) -> PeriodLinks:
    """Links to `name`'s list from `period`'s two parameters (the period's first), then `query`'s."""
    kept = {key: value for key, value in query.items() if value not in (None, "")}
    return PeriodLinks(
        prefix=f"{_path(name, get_script_prefix())}?{period[0]}=",
        until=f"&{period[1]}=",
        rest="&" + urlencode(kept) if kept else "",
        title=title,
        subject=subject,
    )


def _runs(title: str, **query: object) -> PeriodLinks:
    return _period_links("ledger:run-list", ("since", "until"), f"{title}, ", title, **query)


def _runs_ended(title: str, **query: object) -> PeriodLinks:
    """Runs whose last event (the one that ended them) falls in the period."""
    return _period_links(
        "ledger:run-list", ("ended_since", "ended_until"), f"{title}, ended ", f"{title}, ended", **query
    )


def _runs_storing(title: str, **query: object) -> PeriodLinks:
    """Runs the server stored events of in the period (its first write before the period's end,
    its latest at or after its start), as the events chart counts them by when they were stored."""
    return _period_links("ledger:run-list", ("stored_since", "stored_until"), f"{title}, ", title, **query)


def _refusals(title: str, **query: object) -> PeriodLinks:
    return _period_links("refusals:refusal-list", ("since", "until"), f"{title}, ", title, **query)


def _counted(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


# Colours by meaning where a series has one (a status), else a palette in turn.
STATUS_CSS = {"completed": "s-ok", "failed": "s-bad", "halted": "s-warn", "denied": "s-deny", "paused": "s-wait"}
PALETTE = [f"s-{i}" for i in range(8)]


Chart: TypeAlias = "ColumnChart | RankedChart | UsageChart"


def overview_charts(overview: Overview, *, project_slug: str | None) -> dict[str, Chart]:
    """The overview's charts, each with the links behind its marks (filtered to the project
    shown, when one is)."""
    window = overview.window
    buckets, step = overview.buckets, window.step
    since, until = overview.since, overview.buckets[-1] + step
    label = window.label.lower()
    no_runs = "No runs yet: agents post their events to /api/v1/events." if not overview.has_runs else ""
    charts: dict[str, Chart] = {}

    started = overview.counts.get(("run-started", ""), [0] * len(buckets))
    charts["runs_started"] = ColumnChart(
        id="runs-started",
        title="Runs started",
        unit="runs",
        series=[Series("started", "started", "s-0", started, _runs("Runs started", project=project_slug))],
        buckets=buckets,
        step=step,
        empty_reason=no_runs or f"No run started in the {label}.",
    )
    charts["runs_ended"] = ColumnChart(
        id="runs-ended",
        title="Runs ended, by how",
        unit="runs",
        series=[
            Series(
                status,
                status,
                STATUS_CSS.get(status, "s-7"),
                counts,
                _runs_ended(f"Runs now {status}", status=status, project=project_slug),
            )
            for status, counts in overview.series("run-ended").items()
        ],
        buckets=buckets,
        step=step,
        empty_reason=no_runs or f"No run ended in the {label}: none reached turn_end, a fatal error, a halt or a deny.",
    )
    charts["events"] = ColumnChart(
        id="events",
        title=f"Events stored per {_step_name(step)}",
        unit="events",
        series=[
            Series(
                "events",
                "events",
                "s-1",
                overview.counts.get(("events", ""), [0] * len(buckets)),
                _runs_storing("Runs that stored events", project=project_slug),
            )
        ],
        buckets=buckets,
        step=step,
        empty_reason=no_runs or f"No event was stored in the {label}.",
    )
    charts["refusals"] = ColumnChart(
        id="refusals",
        title="Refusals, by category",
        unit="refusals",
        series=[
            Series(
                category,
                category,
                PALETTE[i % len(PALETTE)],
                counts,
                _refusals(f"Refusals ({category})", category=category, project=project_slug),
            )
            for i, (category, counts) in enumerate(overview.series("refusal-category").items())
        ],
        buckets=buckets,
        step=step,
        empty_reason=no_runs or f"Nothing was refused in the {label}.",
    )
    window_period = _encoded_period("since", "until", since, until)
    charts["refusal_rules"] = RankedChart(
        id="refusal-rules",
        title="Rules that refused most",
        heading="refusals",
        items=[
            Ranked(
                rule,
                count,
                Link(
                    _url("refusals:refusal-list", window_period, rule=rule, project=project_slug),
                    f"{_counted(count, 'refusal', 'refusals')} by {rule}, {label}",
                ),
            )
            for rule, count in list(overview.ranking("refusal-rule").items())[:10]
        ],
        empty_reason=no_runs or f"No rule refused anything in the {label}.",
    )
    asks = overview.asks
    charts["asks"] = ColumnChart(
        id="asks",
        title="Asks",
        unit="asks",
        series=[
            Series("opened", "opened", "s-0", asks.opened, _asks("Asks opened", "opened", project=project_slug)),
            Series(
                "decided",
                "decided",
                "s-ok",
                asks.decided,
                _asks("Asks decided", "decided", closed_by="decision", project=project_slug),
            ),
            Series(
                "timed-out",
                "closed by their deadline",
                "s-warn",
                asks.timed_out,
                _asks("Asks closed by their deadline", "decided", closed_by="deadline", project=project_slug),
            ),
        ],
        buckets=buckets,
        step=step,
        empty_reason=f"No ask was opened or decided in the {label}: runs ask when a tool needs a person.",
    )
    charts["tools"] = _tools_chart(overview, label, since, until, project_slug, no_runs)
    charts["usage"] = _usage_chart(overview, project_slug, no_runs)
    return charts


def _asks(title: str, when: str, **query: object) -> PeriodLinks:
    """The asks opened (or decided) in the period: the ask list filtered as the chart counts."""
    return _period_links("asks:ask-list", (f"{when}_since", f"{when}_until"), f"{title}, ", title, **query)


def _tools_chart(
    overview: Overview, label: str, since: datetime, until: datetime, project_slug: str | None, no_runs: str
) -> RankedChart:
    errors, refusals = overview.ranking("tool-error"), overview.ranking("tool-refusal")
    tools = sorted(set(errors) | set(refusals), key=lambda t: (-(errors.get(t, 0) + refusals.get(t, 0)), t))[:10]
    period = _encoded_period("since", "until", since, until)
    # Failed calls are counted when their end was stored: the runs that stored events in the window.
    stored = _encoded_period("stored_since", "stored_until", since, until)
    items = []
    for tool in tools:
        failed, refused = errors.get(tool, 0), refusals.get(tool, 0)
        runs = Link(
            _url("ledger:run-list", stored, tool=tool, project=project_slug), f"Runs that called {tool}, {label}"
        )
        failed_runs = Link(
            _url("ledger:run-list", stored, tool=tool, tool_failed="on", project=project_slug),
            f"Runs where a call of {tool} failed, {label}",
        )
        refusal_link = Link(
            _url("refusals:refusal-list", period, tool=tool, project=project_slug), f"Refusals of {tool}, {label}"
        )
        items.append(
            Ranked(
                tool,
                failed + refused,
                runs,
                also=[
                    ("failed", failed, failed_runs if failed else None),
                    ("refused", refused, refusal_link if refused else None),
                ],
            )
        )
    return RankedChart(
        id="tools",
        title="Tools with the most errors and refusals",
        heading="both",
        items=items,
        also_headings=["failed calls", "refusals"],
        empty_reason=no_runs or f"No tool call failed or was refused in the {label}.",
    )


@dataclass(frozen=True)
class UsageRow:
    day: str
    agent: str
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    link: Link


@dataclass
class UsageChart:
    id: str
    title: str
    columns: ColumnChart
    rows: list[UsageRow]
    empty_reason: str

    @property
    def is_empty(self) -> bool:
        return not self.rows


def _usage_chart(overview: Overview, project_slug: str | None, no_runs: str) -> "UsageChart":
    days = sorted({row.day for row in overview.usage})
    agents = sorted({row.agent for row in overview.usage})
    day_starts = {day: datetime.combine(day, datetime.min.time(), tzinfo=overview.since.tzinfo) for day in days}
    tokens = {(row.day, row.agent): row.tokens_in + row.tokens_out for row in overview.usage}
    # One agent's links for its column's marks and its table rows.
    links = {
        agent: _runs_storing(f"Runs of {agent or 'agents without an id'}", agent=agent or None, project=project_slug)
        for agent in agents
    }
    series = [
        Series(
            agent or "(no agent id)",
            agent or "(no agent id)",
            PALETTE[i % len(PALETTE)],
            [tokens.get((day, agent), 0) for day in days],
            links[agent],
        )
        for i, agent in enumerate(agents)
    ]
    day_labels = {day: day.strftime("%a %d %b") for day in days}
    rows = [
        UsageRow(
            day=day_labels[row.day],
            agent=row.agent or "(no agent id)",
            tokens_in=row.tokens_in,
            tokens_out=row.tokens_out,
            cost_usd=row.cost_usd or None,
            link=links[row.agent](day_starts[row.day], day_starts[row.day] + timedelta(days=1)),
        )
        for row in overview.usage
        if row.tokens_in or row.tokens_out or row.cost_usd
    ]
    return UsageChart(
        id="usage",
        title="Tokens per agent per day",
        columns=ColumnChart(
            id="usage-columns",
            title="Tokens per agent per day",
            unit="tokens",
            series=series,
            buckets=list(day_starts.values()),
            step=timedelta(days=1),
            empty_reason="",
        ),
        rows=rows,
        empty_reason=no_runs
        or "No agent reported token use (usage on stream.llm_end) or cost (cost.tick) in these days.",
    )
