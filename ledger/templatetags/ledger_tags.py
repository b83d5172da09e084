from datetime import UTC, datetime
from typing import Any

import orjson
from django import template

register = template.Library()


@register.filter
def pretty_json(body: str) -> str:
    """Indented JSON text of a stored event body. Autoescaping still applies where it is shown."""
    return orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()


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
