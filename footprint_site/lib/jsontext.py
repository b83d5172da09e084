"""JSON text that orjson refuses only for a lone UTF-16 surrogate escape ("\\ud800" alone).

JavaScript's JSON.stringify writes a string holding half a surrogate pair as that escape, and the
JSON grammar allows it; orjson refuses it. Where the framework's own output can carry one (audit
bundles, whose strings are cut at 255 UTF-16 units; artifact payloads), Python's reader reads it,
held to orjson's other rules so the two readers accept the same texts and read the same values.
"""

import json
import math
from collections.abc import Callable
from typing import Any

# The integers orjson reads as integers (int64 and uint64); beyond, it reads the nearest double.
ORJSON_INTEGERS = range(-(2**63), 2**64)


def is_lone_surrogate_refusal(error: Exception) -> bool:
    """Whether orjson refused the text for a lone surrogate escape (its messages name it)."""
    return "surrogate" in str(error)


def loads_keeping_lone_surrogates(
    text: str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> Any:
    """Python's reader with orjson's refusals (NaN and Infinity, numbers beyond a double), reading
    integers beyond int64 and uint64 as the nearest double, as orjson does, so both readers read
    one text the same way. Raises ValueError (and RecursionError for nesting Python cannot follow)."""
    return json.loads(
        text,
        object_pairs_hook=object_pairs_hook,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        parse_int=_int_as_orjson_reads_it,
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is infinity when read as a double")
    return value


def _int_as_orjson_reads_it(text: str) -> int | float:
    value = int(text)
    return value if value in ORJSON_INTEGERS else _finite_float(text)
