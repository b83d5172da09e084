from typing import Any

from django import template

from ledger.selectors_refusals import json_text

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """A projected JSON value as JSON text, to pipe into `pretty_json` (which escapes nothing itself)."""
    return json_text(value)
