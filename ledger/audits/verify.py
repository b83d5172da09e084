"""The framework's audit bundles (`agentfootprint.audit/1`): verification and export. Pure.

`verify_bundles` is `verifyAuditBundle` (events-ledger spec §5.7) read as JavaScript runs it: the
same checks in the same order, the same `valid`, `recordsChecked` and `brokenAt` (present exactly
when the framework sets it) and the same reasons word for word, so a bundle this server calls
valid the framework's own verifier calls valid too, and vice versa. JavaScript's semantics
(`String()`, `===`, `+` on whatever JSON put in a header) come from footprint_site.lib.js.
"""

import hashlib
import math
import re
from typing import Any, cast

from footprint_site.lib.cjson import canonical
from footprint_site.lib.js import MAX_SAFE_INTEGER as JS_SAFE_LIMIT
from footprint_site.lib.js import as_double, js_number, js_string, js_trim

FORMAT = "agentfootprint.audit/1"
HASH_ALGORITHM = "sha-256"
CANONICALIZATION = "afp-cjson/1"
ZERO_HASH = "0" * 64
MAX_SAFE_INTEGER = 2**53 - 1  # the framework's seqs are JavaScript numbers
LIBRARY = {"name": "footprint-ledger", "version": "0.1.0"}


class _Undefined:
    """JavaScript's `undefined`: what reading a key the JSON did not have gives."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Any = _Undefined()
_JS_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_JS_RADIX = {"0x": 16, "0o": 8, "0b": 2}


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 of the canonical record minus only its `hash` key."""
    preimage = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(preimage).encode("utf-8", "surrogatepass")).hexdigest()


def _get(value: Any, key: str) -> Any:
    """`value[key]` on a parsed value that is not null (an array or a primitive has no such key)."""
    return value.get(key, UNDEFINED) if isinstance(value, dict) else UNDEFINED


def _text(value: Any) -> str:
    return "undefined" if value is UNDEFINED else js_string(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """`a === b` for parsed values: numbers as doubles (JSON's 1.0 is 1, NaN equals nothing), and
    two objects or arrays never, since each JSON.parse makes new ones."""
    if _is_number(a) and _is_number(b):
        return as_double(a) == as_double(b)
    if isinstance(a, dict | list) or isinstance(b, dict | list) or _is_number(a) or _is_number(b):
        return False
    return type(a) is type(b) and a == b  # str, bool, None, undefined


def _to_number(value: Any) -> int | float:
    """Number(value), for what `+` and `-` may meet in a header."""
    if _is_number(value):
        return value if isinstance(value, int) and abs(value) < JS_SAFE_LIMIT else as_double(value)
    if value is None or isinstance(value, bool):
        return int(value or 0)
    if isinstance(value, str):
        text = js_trim(value)
        if not text:
            return 0
        if _JS_DECIMAL.fullmatch(text):
            return float(text.replace("Infinity", "inf"))
        radix = _JS_RADIX.get(text[:2].lower())
        try:
            return int(text[2:], radix) if radix else math.nan
        except ValueError:
            return math.nan
    return math.nan  # undefined, objects and arrays that do not read as numbers


def _plus(value: Any, n: int) -> Any:
    """`value + n`: text when either side is text (an object or array reads as text), else numbers."""
    if isinstance(value, str | dict | list):
        return _text(value) + js_number(n)
    return _to_number(value) + n


def _as_json(value: Any) -> Any:
    """A seq as JSON.stringify writes it: NaN and ±Infinity are null, 52.0 is 52."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, float) and value == int(value):
        return int(value)
    return value


def whole_number(value: Any) -> int | None:
    """A seq as the framework reads it: a JavaScript number, so JSON's 52.0 is 52; None unless a
    whole number from 0 to MAX_SAFE_INTEGER."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SAFE_INTEGER:
        return None
    return int(value) if value == int(value) else None


def _answer(valid: bool, checked: int, broken_at: Any = UNDEFINED, reason: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"valid": valid, "recordsChecked": checked}
    if not valid:
        if broken_at is not UNDEFINED:
            answer["brokenAt"] = _as_json(broken_at)
        answer["reason"] = reason
    return answer


def verify_bundles(bundles: Any) -> dict[str, Any]:
    """Verify one bundle or an ordered list of drained segments; report only the first failure.

    Where the framework throws instead of answering (a segment or header that is JSON's null), the
    answer is the one it gives for a segment that is not an object, or a missing header.
    """
    segments = bundles if isinstance(bundles, list) else [bundles]
    checked = 0
    expected_head: Any = UNDEFINED
    expected_first: Any = UNDEFINED

    def fail(reason: str, broken_at: Any = UNDEFINED) -> dict[str, Any]:
        return _answer(False, checked, broken_at, reason)

    if not segments:
        return fail("no bundles supplied")
    for index, segment in enumerate(segments):
        where = f" (segment {index})" if len(segments) > 1 else ""
        if not isinstance(segment, dict | list):
            return fail(f"bundle is not an object{where}")
        header, records, final_hash = _get(segment, "header"), _get(segment, "records"), _get(segment, "finalHash")
        if header is UNDEFINED or header is None or not isinstance(records, list) or not isinstance(final_hash, str):
            return fail(f"bundle missing header/records/finalHash{where}")
        first_seq, chain_head = _get(header, "firstSeq"), _get(header, "chainHead")
        for key, supported in (
            ("format", FORMAT),
            ("hashAlgorithm", HASH_ALGORITHM),
            ("canonicalization", CANONICALIZATION),
        ):
            if not _same(_get(header, key), supported):
                return fail(f"unsupported {key} '{_text(_get(header, key))}'{where}")
        if not _same(_get(header, "recordCount"), len(records)):
            count = _text(_get(header, "recordCount"))
            return fail(f"recordCount {count} does not match {len(records)} records{where}")
        if expected_head is not UNDEFINED and not _same(chain_head, expected_head):
            return fail(
                f"segment discontinuity — chainHead does not match previous segment's finalHash{where}", first_seq
            )
        if expected_first is not UNDEFINED and not _same(first_seq, expected_first):
            return fail(
                f"segment discontinuity — firstSeq {_text(first_seq)}, expected {_text(expected_first)}{where}",
                expected_first,
            )
        # The framework's head-truncation guard: a chain start anchors on the zero hash, both ways.
        if _same(first_seq, 0) and not _same(chain_head, ZERO_HASH):
            return fail(f"head-truncation guard — firstSeq 0 requires chainHead to be the zero hash{where}", 0)
        if _same(chain_head, ZERO_HASH) and not _same(first_seq, 0):
            return fail(
                f"head-truncation guard — zero-hash chainHead requires firstSeq 0, got {_text(first_seq)}{where}",
                first_seq,
            )
        running = chain_head
        for i, record in enumerate(records):
            expected_seq = _plus(first_seq, i)
            if not isinstance(record, dict | list):
                return fail(f"record at seq {_text(expected_seq)} is not an object", expected_seq)
            if not _same(_get(record, "seq"), expected_seq):
                carried = _text(_get(record, "seq"))
                return fail(
                    f"sequence mismatch — record carries seq {carried}, expected {_text(expected_seq)}", expected_seq
                )
            record = cast(dict[str, Any], record)  # an array carries no `seq`: refused just above
            if not _same(_get(record, "prevHash"), running):
                return fail("chain broken — prevHash does not match the preceding record's hash", expected_seq)
            if not _same(record_hash(record), _get(record, "hash")):
                return fail(
                    "hash mismatch — record content does not match its hash (tampered or corrupted)", expected_seq
                )
            running = record["hash"]
            checked += 1
        if not _same(final_hash, running):
            last = _to_number(_plus(first_seq, len(records))) - 1 if records else first_seq
            return fail(f"finalHash does not match the last record's hash{where}", last)
        expected_head, expected_first = final_hash, _plus(first_seq, len(records))
    return _answer(True, checked)


def build_bundle(
    records: list[dict[str, Any]], *, exported_at: int, chain_head: str = ZERO_HASH, first_seq: int = 0
) -> dict[str, Any]:
    """Chain `records` ({timestamp, eventType, payload?, meta}) into a bundle the framework verifies."""
    chained = []
    previous = chain_head
    for offset, record in enumerate(records):
        preimage: dict[str, Any] = {
            "seq": first_seq + offset,
            "timestamp": record["timestamp"],
            "eventType": record["eventType"],
        }
        if "payload" in record:
            preimage["payload"] = record["payload"]
        preimage["meta"] = record["meta"]
        preimage["prevHash"] = previous
        preimage["hash"] = previous = record_hash(preimage)
        chained.append(preimage)
    header = {
        "format": FORMAT,
        "hashAlgorithm": HASH_ALGORITHM,
        "canonicalization": CANONICALIZATION,
        "chainHead": chain_head,
        "firstSeq": first_seq,
        "recordCount": len(chained),
        "exportedAt": exported_at,
        "library": LIBRARY,
    }
    return {"header": header, "records": chained, "finalHash": previous}
