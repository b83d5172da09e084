"""afp-cjson/1: the framework's canonical JSON for audit bundles (events-ledger spec §5.5).

Keys sorted by UTF-16 code units, no whitespace, JSON.stringify string escaping, ECMAScript
number formatting. Pure functions; the input is what `json.loads` produced from the bundle.
"""

from decimal import Decimal
from typing import Any

MAX_SAFE_INTEGER = 2**53
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _utf16_key(key: str) -> bytes:
    # JavaScript sorts strings by UTF-16 code units; code-point order differs above U+FFFF.
    return key.encode("utf-16-be", "surrogatepass")


def js_number(value: int | float) -> str:
    """ECMAScript Number::toString of the double nearest `value`."""
    if isinstance(value, int) and abs(value) < MAX_SAFE_INTEGER:
        return str(value)
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        return "null"
    if number == 0:
        return "0"  # -0 prints as 0
    sign = "-" if number < 0 else ""
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


def js_string(value: str) -> str:
    out = ['"']
    for char in value:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:  # controls, and lone surrogates, as \\u00xx
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def canonical(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return js_number(value)
    if isinstance(value, str):
        return js_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: _utf16_key(item[0]))
        return "{" + ",".join(js_string(k) + ":" + canonical(v) for k, v in items) + "}"
    raise TypeError(f"afp-cjson cannot carry a {type(value).__name__}")
