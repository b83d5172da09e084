"""JavaScript's semantics where the framework's wording or hashing depends on them. Pure.

The input is what a JSON parser produced: None, bool, int, float, str, list, dict.
"""

import math
from decimal import Decimal
from typing import Any

MAX_SAFE_INTEGER = 2**53
MAX_ARRAY_INDEX = 2**32 - 2

# String.prototype.trim: WhiteSpace and LineTerminator code points (ECMA-262), which differ from
# Python's str.strip() (JS trims U+FEFF; Python also trims U+001C-U+001F and U+0085).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

# What `name in value` also finds on a parsed JSON object or array: its prototype's own names
# (Object.getOwnPropertyNames of Object.prototype and Array.prototype, Node 20).
# fmt: off
OBJECT_PROTOTYPE_NAMES = frozenset({
    "constructor", "__defineGetter__", "__defineSetter__", "hasOwnProperty", "__lookupGetter__",
    "__lookupSetter__", "isPrototypeOf", "propertyIsEnumerable", "toString", "valueOf", "__proto__",
    "toLocaleString",
})
ARRAY_PROTOTYPE_NAMES = OBJECT_PROTOTYPE_NAMES | frozenset({
    "length", "at", "concat", "copyWithin", "fill", "find", "findIndex", "findLast", "findLastIndex",
    "lastIndexOf", "pop", "push", "reverse", "shift", "unshift", "slice", "sort", "splice", "includes",
    "indexOf", "join", "keys", "entries", "values", "forEach", "filter", "flat", "flatMap", "map",
    "every", "some", "reduce", "reduceRight", "toReversed", "toSorted", "toSpliced", "with",
})
# fmt: on


def js_trim(value: str) -> str:
    return value.strip(JS_WHITESPACE)


def js_number(value: int | float) -> str:
    """Number::toString of the double nearest `value` (ECMA-262 §6.1.6.1.20)."""
    if isinstance(value, int) and abs(value) < MAX_SAFE_INTEGER:
        return str(value)
    number = as_double(value)
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"  # -0 prints as 0
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that round-trip, the digits ECMAScript asks for.
    digits_tuple, exponent = Decimal(repr(abs(number))).as_tuple()[1:]
    digits = "".join(map(str, digits_tuple)).rstrip("0")
    exponent = int(exponent) + (len(digits_tuple) - len(digits))
    k = len(digits)
    n = exponent + k  # the value is 0.digits * 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + text


def as_double(value: int | float) -> float:
    """The double JSON.parse reads for a number Python parsed exactly."""
    try:
        return float(value)
    except OverflowError:  # an integer literal beyond the doubles: JavaScript reads Infinity
        return math.inf if value > 0 else -math.inf


def js_quote(value: str) -> str:
    """A string as JSON.stringify writes it (lone surrogates escaped, as since ES2019)."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _is_array_index(key: str) -> bool:
    return key.isdigit() and key.isascii() and (key == "0" or key[0] != "0") and int(key) <= MAX_ARRAY_INDEX


def js_entries(value: dict[str, Any]) -> list[tuple[str, Any]]:
    """Object.entries: array-index keys ascending first, then the rest in insertion order."""
    indices = sorted((key for key in value if _is_array_index(key)), key=int)
    return [(key, value[key]) for key in indices] + [item for item in value.items() if not _is_array_index(item[0])]


def js_stringify(value: Any) -> str:
    """JSON.stringify of a parsed JSON value (what the framework quotes in its refusals)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value) if math.isfinite(as_double(value)) else "null"
    if isinstance(value, str):
        return js_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(js_stringify(v) for v in value) + "]"
    return "{" + ",".join(js_quote(key) + ":" + js_stringify(item) for key, item in js_entries(value)) + "}"


def js_string(value: Any) -> str:
    """String(value) for a parsed JSON value, as a template literal would print it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value)
    if isinstance(value, list):
        return ",".join("" if v is None else js_string(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def js_has_property(value: dict[str, Any] | list[Any], name: str) -> bool:
    """`name in value` for a parsed JSON object or array, its prototype's names included."""
    if isinstance(value, list):
        return (_is_array_index(name) and int(name) < len(value)) or name in ARRAY_PROTOTYPE_NAMES
    return name in value or name in OBJECT_PROTOTYPE_NAMES


def js_own_property(value: dict[str, Any] | list[Any], name: str) -> Any:
    """`value[name]` when it is an own entry of the parsed object or array, else None."""
    if isinstance(value, list):
        return value[int(name)] if _is_array_index(name) and int(name) < len(value) else None
    return value.get(name)


def js_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: a double and the digits jsonb kept of it as the same number (jsonb
    reads 1.2345678901234568e18 back as the integer 1234567890123456800), two integers exactly (a
    copy whose 9007199254740993 became 9007199254740992 differs), a boolean never a number,
    objects by their keys whatever their order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and as_double(a) == as_double(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(js_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(js_equal, a, b))
    return bool(a == b)
