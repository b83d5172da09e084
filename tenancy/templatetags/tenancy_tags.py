from typing import Any

import orjson
from django import template

from tenancy.models import AdminChange

register = template.Library()

ABSENT = "—"  # the side of a change where the object did not exist


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return ", ".join(str(item) for item in value) or "none"
    return orjson.dumps(value).decode()  # nothing the services write today; shown whole, escaped


def _named(key: str) -> str:
    return key.removesuffix("_ms").replace("_", " ") + (" (ms)" if key.endswith("_ms") else "")


@register.filter
def change_lines(change: AdminChange) -> list[tuple[str, str, str]]:
    """(what, before, after) per changed value, readable: 'role', 'auditor', 'admin'."""
    before = change.before if isinstance(change.before, dict) else {}
    after = change.after if isinstance(change.after, dict) else {}
    keys = list(dict.fromkeys([*before, *after]))
    return [
        (
            _named(key),
            _shown(before[key]) if key in before else ABSENT,
            _shown(after[key]) if key in after else ABSENT,
        )
        for key in keys
    ]
