"""The two small languages of who may decide, as pure functions: an approval rule's conditions on
a call's arguments ("amount > 1000"), and a standing approval's pattern (each argument an exact
value, or bounds for a number). Parsing refuses with a sentence naming the field; matching never
raises.
"""

import math
import re
from typing import Any, Final

import orjson

from ledger.exceptions import ApproverRuleInvalid, StandingApprovalInvalid

# op → (how a person writes it, the test)
OPERATORS: Final[dict[str, str]] = {"eq": "=", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_SYMBOLS: Final = {symbol: op for op, symbol in OPERATORS.items()} | {"==": "eq"}
_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]{0,99})\s*(==|!=|>=|<=|=|>|<)\s*(.+?)\s*$")
MAX_CONDITIONS = 10
BOUND_KEYS: Final = frozenset({"min", "max"})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _json_value(text: str) -> Any:
    """A condition's value: JSON when it parses (1000, "EUR", true), else the bare text."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def conditions_parse(text: str) -> list[dict[str, Any]]:
    """Conditions written one a line ("amount > 1000", "currency = \"EUR\""), as stored. Raises
    ApproverRuleInvalid naming the line, for an unknown form, a comparison of a non-number, or a
    set of conditions no call could meet (amount > 1000 and amount < 500)."""
    conditions = []
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_CONDITIONS:
        raise ApproverRuleInvalid(f"conditions: at most {MAX_CONDITIONS} lines; these are {len(lines)}.")
    for number, line in enumerate(lines, 1):
        found = _CONDITION.match(line)
        if found is None:
            raise ApproverRuleInvalid(
                f"conditions, line {number}: write an argument, a comparison and a value, "
                f'like amount > 1000 or currency = "EUR"; got {line.strip()[:80]!r}.'
            )
        arg, symbol, raw = found.groups()
        op, value = _SYMBOLS[symbol], _json_value(raw)
        if op not in ("eq", "ne") and not _is_number(value):
            raise ApproverRuleInvalid(
                f"conditions, line {number}: {symbol} compares numbers, and {raw[:40]!r} is not one."
            )
        conditions.append({"arg": arg, "op": op, "value": value})
    _check_satisfiable(conditions)
    return conditions


def _check_satisfiable(conditions: list[dict[str, Any]]) -> None:
    by_arg: dict[str, list[dict[str, Any]]] = {}
    for condition in conditions:
        by_arg.setdefault(condition["arg"], []).append(condition)
    for arg, tests in by_arg.items():
        low, high = -math.inf, math.inf
        low_open = high_open = False
        exact = [t["value"] for t in tests if t["op"] == "eq"]
        for t in tests:
            if t["op"] in ("gt", "gte") and (t["value"] > low or (t["value"] == low and t["op"] == "gt")):
                low, low_open = t["value"], t["op"] == "gt"
            if t["op"] in ("lt", "lte") and (t["value"] < high or (t["value"] == high and t["op"] == "lt")):
                high, high_open = t["value"], t["op"] == "lt"
        empty_range = low > high or (low == high and (low_open or high_open))
        two_values = len({orjson.dumps(v) for v in exact}) > 1
        excluded = any(t["op"] == "ne" and t["value"] in exact for t in tests)
        outside = any(
            _is_number(v) and not conditions_match([t for t in tests if t["op"] != "eq"], {arg: v}, arg_only=arg)
            for v in exact
        )
        if empty_range or two_values or excluded or outside:
            raise ApproverRuleInvalid(f"conditions: no call could meet every condition on {arg} at once.")


def _arg_at(args: Any, path: str) -> tuple[bool, Any]:
    current = args
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _holds(op: str, actual: Any, wanted: Any) -> bool:
    if op == "eq":
        if _is_number(actual) or _is_number(wanted):
            return _is_number(actual) and _is_number(wanted) and actual == wanted
        # JSON equality: true is not 1, and an object's key order does not matter.
        return _canonical(actual) == _canonical(wanted)
    if op == "ne":
        return not _holds("eq", actual, wanted)
    if not _is_number(actual):
        return False
    return {"gt": actual > wanted, "gte": actual >= wanted, "lt": actual < wanted, "lte": actual <= wanted}[op]


def conditions_match(conditions: list[dict[str, Any]], args: Any, *, arg_only: str | None = None) -> bool:
    """Whether a call's arguments meet every condition. A condition on an argument the call lacks
    is not met, except `!=`."""
    for condition in conditions:
        if arg_only is not None and condition["arg"] != arg_only:
            continue
        present, actual = _arg_at(args, condition["arg"])
        if not present:
            if condition["op"] == "ne":
                continue
            return False
        if not _holds(condition["op"], actual, condition["value"]):
            return False
    return True


def conditions_text(conditions: list[dict[str, Any]]) -> str:
    """How a person reads stored conditions: the lines they were written as."""
    return " and ".join(f"{c['arg']} {OPERATORS[c['op']]} {orjson.dumps(c['value']).decode()}" for c in conditions)


# --- standing approvals' patterns ------------------------------------------------------------------


def pattern_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """The pattern a standing approval starts from: every argument exactly as the ask showed it."""
    return dict(args)


def _is_bounds(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and value.keys() <= BOUND_KEYS


def pattern_check(pattern: Any, seen: Any) -> dict[str, Any]:
    """The pattern a person edited, refused unless it is no wider than what they saw: an object
    naming every argument of the ask's call and no other, each the value the ask showed or, for a
    number, bounds {"min", "max"} that hold the value shown."""
    if not isinstance(seen, dict):
        raise StandingApprovalInvalid(
            "This ask's arguments are not known (or not an object), so no standing approval can say which "
            "calls it covers: decide this ask alone."
        )
    if not isinstance(pattern, dict):
        raise StandingApprovalInvalid('pattern must be a JSON object: {"argument": value or {"min": …, "max": …}}.')
    missing, extra = seen.keys() - pattern.keys(), pattern.keys() - seen.keys()
    if missing:
        raise StandingApprovalInvalid(
            f"pattern must name every argument the ask showed; it leaves out {', '.join(sorted(missing))}."
        )
    if extra:
        raise StandingApprovalInvalid(f"pattern names arguments the ask did not show: {', '.join(sorted(extra))}.")
    for name, wanted in pattern.items():
        shown = seen[name]
        if _is_bounds(wanted) and _is_number(shown):
            low, high = wanted.get("min"), wanted.get("max")
            for bound, value in (("min", low), ("max", high)):
                if value is not None and not _is_number(value):
                    raise StandingApprovalInvalid(f"pattern.{name}.{bound} must be a number.")
            if low is not None and high is not None and low > high:
                raise StandingApprovalInvalid(f"pattern.{name}: min ({low}) is above max ({high}).")
            if (low is not None and shown < low) or (high is not None and shown > high):
                raise StandingApprovalInvalid(
                    f"pattern.{name} must hold the value the ask showed ({shown}): it approves this call too."
                )
        elif not _holds("eq", shown, wanted):
            raise StandingApprovalInvalid(
                f"pattern.{name} must be the value the ask showed"
                + (', or bounds {"min": …, "max": …} around it' if _is_number(shown) else "")
                + "."
            )
    return pattern


def pattern_match(pattern: dict[str, Any], args: Any) -> bool:
    """Whether a later call's arguments are covered: the same arguments, no more and no fewer, each
    equal to the pattern's value or, for bounds, a number within them."""
    if not isinstance(args, dict) or args.keys() != pattern.keys():
        return False
    for name, wanted in pattern.items():
        actual = args[name]
        if _is_bounds(wanted) and all(_is_number(v) for v in wanted.values()):
            if not _is_number(actual):
                return False
            if ("min" in wanted and actual < wanted["min"]) or ("max" in wanted and actual > wanted["max"]):
                return False
        elif not _holds("eq", actual, wanted):
            return False
    return True


def pattern_text(pattern: dict[str, Any]) -> str:
    """How a person reads a pattern: "amount between 0 and 1000, to = "ACC-9"."""
    parts = []
    for name, wanted in pattern.items():
        if _is_bounds(wanted):
            low, high = wanted.get("min"), wanted.get("max")
            if low is not None and high is not None:
                parts.append(f"{name} from {low} to {high}")
            else:
                parts.append(f"{name} {'≥ ' + str(low) if low is not None else '≤ ' + str(high)}")
        else:
            parts.append(f"{name} = {orjson.dumps(wanted).decode()}")
    return ", ".join(parts) or "no arguments"
