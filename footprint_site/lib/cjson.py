"""afp-cjson/1: the framework's canonical JSON for audit bundles (events-ledger spec §5.5).

Keys sorted by UTF-16 code units, no whitespace, JSON.stringify string escaping, ECMAScript
number formatting. Pure functions; the input is what `json.loads` produced from the bundle.
"""

import math
from typing import Any

from footprint_site.lib.js import as_double, js_number, js_quote


def _utf16_key(key: str) -> bytes:
    # JavaScript sorts strings by UTF-16 code units; code-point order differs above U+FFFF.
    return key.encode("utf-16-be", "surrogatepass")


def canonical(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return js_number(value) if math.isfinite(as_double(value)) else "null"
    if isinstance(value, str):
        return js_quote(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: _utf16_key(item[0]))
        return "{" + ",".join(js_quote(k) + ":" + canonical(v) for k, v in items) + "}"
    raise TypeError(f"afp-cjson cannot carry a {type(value).__name__}")
