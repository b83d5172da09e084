import json
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

from footprint_site.lib import durations

register = template.Library()


@register.filter
def pretty_json(body: str) -> str:
    """Indented JSON text of a stored event body. Autoescaping still applies where it is shown."""
    try:
        return orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:  # integers beyond 64 bits: the standard library keeps them exact
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)


@register.filter
def duration(value: timedelta) -> str:
    """'2 h 03 min', '4 min 05 s', '1.234 s'."""
    seconds = value.total_seconds()
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@register.filter
def human_ms(value: float) -> str:
    """A duration in milliseconds for people: '840 ms', '12.4 s', '3.2 min'."""
    return durations.human_ms(value)


@register.filter
def pretty(value: Any) -> str:
    """Indented JSON text of a projected JSON value (args, results, before/after). Shown escaped."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


@register.filter
def from_ms(value: Any) -> datetime | None:
    return datetime.fromtimestamp(value / 1000, tz=UTC) if isinstance(value, int | float) else None


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


@register.simple_tag
def waterfall_bars(lane: Any, events_url: str, tab_url: str) -> str:
    """A waterfall lane's bars as SVG links. Written here rather than in a template loop: a dense
    window has about a thousand bars, and the template engine spent most of the page's time on them."""
    parts = []
    y = lane.bar_y
    for bar in lane.bars:
        if bar.zoom:
            href, role = f"{escape(tab_url)}?from={bar.zoom[0]}&amp;to={bar.zoom[1]}", "zoom"
        else:
            href, role = f"{escape(events_url)}{bar.position}/", "event"
        parts.append(
            f'<a href="{href}" data-waterfall="{role}"><rect class="{bar.css}" x="{bar.x}" y="{y}"'
            f' width="{bar.width}" height="16"/><title>{escape(bar.title)}</title></a>'
        )
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped or a number
