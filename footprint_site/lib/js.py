"""JavaScript's string semantics where the framework's wording depends on them. Pure."""

from typing import Any

import orjson

# String.prototype.trim: WhiteSpace and LineTerminator code points (ECMA-262), which differ from
# Python's str.strip() (JS trims U+FEFF; Python also trims U+001C-U+001F and U+0085).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(value: str) -> str:
    return value.strip(JS_WHITESPACE)


def js_stringify(value: Any) -> str:
    """JSON.stringify of a JSON value (what the framework quotes in its refusals)."""
    return orjson.dumps(value).decode()


def js_string(value: Any) -> str:
    """String(value) for a JSON value, as a template literal would print it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join("" if v is None else js_string(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
