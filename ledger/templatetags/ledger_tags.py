import functools
import html
import json
import math
from datetime import datetime
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import orjson
from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ledger.asks import approver_rules

register = template.Library()


@register.filter
def pretty_json(body: str) -> str:
    """Indented JSON text of a stored event body. Autoescaping still applies where it is shown."""
    try:
        return orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:  # integers beyond 64 bits: the standard library keeps them exact
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)


@register.filter
def pretty(value: Any) -> str:
    """Indented JSON text of a projected JSON value (args, results, before/after). Shown escaped."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


@register.filter
def short_type(value: str) -> str:
    return value.removeprefix("agentfootprint.")


@register.filter
def json_part(body: str, key: str) -> str:
    """One top-level member of a stored event body, indented; shown escaped like all payloads."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = json.loads(body)
    if not isinstance(document, dict) or key not in document:
        return "(absent)"
    try:
        return orjson.dumps(document[key], option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return json.dumps(document[key], indent=2, ensure_ascii=False)


@register.filter
def as_hex(value: bytes | memoryview) -> str:
    return bytes(value).hex()


@register.filter
def conditions_text(conditions: list[dict[str, Any]]) -> str:
    """An approval rule's conditions as a person writes them ("amount > 1000 and …")."""
    return approver_rules.conditions_text(conditions)


@register.filter
def pattern_text(pattern: dict[str, Any]) -> str:
    """A standing approval's argument pattern in words ("amount from 0 to 1000, to = …")."""
    return approver_rules.pattern_text(pattern)


@register.simple_tag
def waterfall_bars(lane: Any, events_url: str, tab_url: str) -> str:
    """A waterfall lane's bars as SVG links. Written here rather than in a template loop: a dense
    window has about a thousand bars, and the template engine spent most of the page's time on them."""
    parts = []
    y = lane.bar_y
    # html.escape, not django's escape: the same entities, cheaper, and a dense window has ~720 bars.
    tab_url, events_url = html.escape(tab_url), html.escape(events_url)
    for bar in lane.bars:
        if bar.zoom:
            href, role = f"{tab_url}?from={bar.zoom[0]}&amp;to={bar.zoom[1]}", "zoom"
        else:
            href, role = f"{events_url}{bar.position}/", "event"
        parts.append(
            f'<a href="{href}" data-waterfall="{role}"><rect class="{bar.css}" x="{bar.x}" y="{y}"'
            f' width="{bar.width}" height="16"/><title>{html.escape(bar.title)}</title></a>'
        )
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped or a number


@register.simple_tag
def moment_attributes(moment: datetime | None) -> str:
    """datetime and data-moment on a <time> naming one moment in UTC words: static/js/pages.js
    writes it again in the reader's time zone, the rule every page's times follow (the `when`
    filter). Periods carry data-period-start/-end the same way (chart_marks, chart_rows, usage_rows)."""
    if not isinstance(moment, datetime):
        return ""
    return format_html(' datetime="{}" data-moment', moment.isoformat())


@functools.lru_cache(maxsize=4096)  # a period is named by each of its column's marks and cells
def _period_text(start: datetime | None, end: datetime | None, subject: str = "") -> str:
    """data-period-start/-end (ISO instants) and data-subject of an element naming a period in UTC
    words, for static/js/pages.js to write again in the reader's time zone."""
    if start is None or end is None:
        return ""
    subject_text = f' data-subject="{html.escape(subject)}"' if subject else ""
    return f' data-period-start="{start.isoformat()}" data-period-end="{end.isoformat()}"{subject_text}'


@register.simple_tag
def chart_marks(chart: Any) -> str:
    """An overview column chart's marks as SVG links, each with its title. Written here rather
    than in a template loop, as waterfall_bars: a busy 10-project window has hundreds of marks."""
    parts = []
    for mark in chart.marks:
        link = mark.link
        parts.append(
            f'<a href="{html.escape(link.href)}" class="mark"><rect class="{mark.css}" x="{mark.x}" y="{mark.y}"'
            f' width="{mark.width}" height="{mark.height}"><title{_period_text(link.start, link.end, link.subject)}>'
            f"{html.escape(link.title)}</title></rect></a>"
        )
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped or a number


@register.simple_tag
def chart_rows(chart: Any) -> str:
    """An overview column chart's table rows (its text alternative), one per period with counts."""
    parts = []
    for row in chart.rows:
        cells = []
        for cell in row.cells:
            link = cell.link
            if link is None:
                cells.append(f"<td>{cell.value}</td>")
            else:
                cells.append(
                    f'<td><a href="{html.escape(link.href)}" title="{html.escape(link.title)}"'
                    f"{_period_text(link.start, link.end, link.subject)}>{cell.value}</a></td>"
                )
        parts.append(
            f'<tr><td><time datetime="{row.start.isoformat()}"{_period_text(row.start, row.end)}>'
            f"{html.escape(row.label)}</time></td>{''.join(cells)}</tr>"
        )
    return mark_safe("\n".join(parts))  # noqa: S308 - every value above is escaped or a number


@register.simple_tag
def ranked_rows(chart: Any) -> str:
    """A ranked chart's rows: the thing and its link, its bar (a <meter>) and figure, and the figures
    it is the sum of, each with its link when it has one. Written here rather than in a template
    loop, as chart_rows: a row resolved a dozen template variables, and a busy window fills all ten
    rows of both rankings."""
    top = chart.top
    parts = []
    for item in chart.items:
        link = item.link
        also = "".join(
            f"<td>{value}</td>"
            if other is None
            else f'<td><a href="{html.escape(other.href)}" title="{html.escape(other.title)}">{value}</a></td>'
            for _name, value, other in item.also
        )
        parts.append(
            f'<tr><td class="ranked-label"><a href="{html.escape(link.href)}" title="{html.escape(link.title)}">'
            f'{html.escape(item.label)}</a></td><td class="bar-cell"><meter min="0" max="{top}" value="{item.value}"'
            f' title="{item.value} of {top}">{item.value}</meter></td><td>{item.value}</td>{also}</tr>'
        )
    return mark_safe("\n".join(parts))  # noqa: S308 - every value above is escaped or a number


def _dollars(amount: float) -> str:
    """An amount to four places, rounded half up and cut off as floatformat:4 does, without the
    localisation machinery that was most of a usage row's time."""
    if not math.isfinite(amount):
        return repr(amount)
    exact = Decimal(repr(amount))
    _sign, digits, exponent = exact.as_tuple()
    if len(digits) + abs(int(exponent)) > 200:  # floatformat's cut-off: such a number is shown as it is
        return repr(amount)
    return str(exact.quantize(_FOUR_PLACES, ROUND_HALF_UP, _EVERY_DIGIT))


_FOUR_PLACES = Decimal("0.0001")
_EVERY_DIGIT = Context(prec=210)  # within the cut-off, and four places


@register.simple_tag
def usage_rows(usage: Any) -> str:
    """The usage table's rows, one a day and agent, written here as chart_rows writes a chart's."""
    parts = []
    for row in usage.rows:
        link = row.link
        cost = '<span class="muted">not reported</span>' if row.cost_usd is None else f"${_dollars(row.cost_usd)}"
        parts.append(
            f'<tr><td><time datetime="{link.start.isoformat()}"{_period_text(link.start, link.end)}>'
            f"{html.escape(row.day)}</time></td>"
            f'<td><a href="{html.escape(link.href)}" title="{html.escape(link.title)}"'
            f"{_period_text(link.start, link.end, link.subject)}>{html.escape(row.agent)}</a></td>"
            f"<td>{row.tokens_in}</td><td>{row.tokens_out}</td><td>{cost}</td></tr>"
        )
    return mark_safe("\n".join(parts))  # noqa: S308 - every value above is escaped, a number or a formatted number
