"""The framework's audit bundles (`agentfootprint.audit/1`): verification and export. Pure.

`verify_bundles` is `verifyAuditBundle` (events-ledger spec §5.7): the same checks in the same
order, the same answer shape and the same reasons, so a bundle this server calls valid the
framework's own verifier calls valid too, and vice versa.
"""

import hashlib
from typing import Any

from footprint_site.lib.cjson import canonical

FORMAT = "agentfootprint.audit/1"
HASH_ALGORITHM = "sha-256"
CANONICALIZATION = "afp-cjson/1"
ZERO_HASH = "0" * 64
MAX_SAFE_INTEGER = 2**53 - 1  # the framework's seqs are JavaScript numbers
LIBRARY = {"name": "footprint-ledger", "version": "0.1.0"}


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 of the canonical record minus only its `hash` key."""
    preimage = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(preimage).encode("utf-8", "surrogatepass")).hexdigest()


def _same_number(value: Any, expected: int) -> bool:
    """JavaScript's `value === expected`: JSON's 1.0 is the number 1 there, but `true` is no number."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == expected


def whole_number(value: Any) -> int | None:
    """A seq as the framework reads it: a JavaScript number, so JSON's 52.0 is 52; None unless a
    whole number from 0 to MAX_SAFE_INTEGER."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SAFE_INTEGER:
        return None
    return int(value) if value == int(value) else None


def _answer(valid: bool, checked: int, broken_at: int | None = None, reason: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"valid": valid, "recordsChecked": checked}
    if not valid:
        if broken_at is not None:
            answer["brokenAt"] = broken_at
        answer["reason"] = reason
    return answer


def verify_bundles(bundles: Any) -> dict[str, Any]:
    """Verify one bundle or an ordered list of drained segments; report only the first failure."""
    segments = bundles if isinstance(bundles, list) else [bundles]
    if not segments:
        return _answer(False, 0, None, "no bundles supplied")
    checked = 0
    previous: dict[str, Any] | None = None
    next_seq = 0  # the seq the previous segment's successor starts at
    for index, segment in enumerate(segments):
        suffix = f" (segment {index})" if len(segments) > 1 else ""
        if (
            not isinstance(segment, dict)
            or not isinstance(segment.get("header"), dict)
            or not isinstance(segment.get("records"), list)
            or not isinstance(segment.get("finalHash"), str)
        ):
            return _answer(False, checked, None, f"malformed bundle — expected {{header, records, finalHash}}{suffix}")
        header, records = segment["header"], segment["records"]
        first_seq = whole_number(header.get("firstSeq"))
        if (
            header.get("format") != FORMAT
            or header.get("hashAlgorithm") != HASH_ALGORITHM
            or header.get("canonicalization") != CANONICALIZATION
        ):
            return _answer(
                False,
                checked,
                first_seq,
                f"unsupported bundle — format, hashAlgorithm or canonicalization is not "
                f"{FORMAT} / {HASH_ALGORITHM} / {CANONICALIZATION}{suffix}",
            )
        if not _same_number(header.get("recordCount"), len(records)):
            return _answer(
                False,
                checked,
                first_seq,
                f"recordCount {header.get('recordCount')} does not match {len(records)} records{suffix}",
            )
        if first_seq is None:
            return _answer(
                False,
                checked,
                None,
                f"sequence mismatch — header.firstSeq must be a whole number from 0 to {MAX_SAFE_INTEGER}{suffix}",
            )
        chain_head = header.get("chainHead")
        if previous is not None:
            if chain_head != previous["finalHash"]:
                return _answer(
                    False,
                    checked,
                    first_seq,
                    f"segment discontinuity — chainHead does not match previous segment's finalHash{suffix}",
                )
            expected_first = next_seq
            if first_seq != expected_first:
                return _answer(
                    False,
                    checked,
                    expected_first,
                    f"segment discontinuity — firstSeq {first_seq}, expected {expected_first}{suffix}",
                )
        if first_seq == 0 and chain_head != ZERO_HASH:
            return _answer(
                False, checked, 0, f"truncated head — firstSeq is 0 but chainHead is not the zero hash{suffix}"
            )
        if chain_head == ZERO_HASH and first_seq != 0:
            return _answer(
                False,
                checked,
                first_seq,
                f"truncated head — chainHead is the zero hash but firstSeq is {first_seq}{suffix}",
            )
        running = chain_head
        for i, record in enumerate(records):
            expected_seq = first_seq + i
            if not isinstance(record, dict):
                return _answer(False, checked, expected_seq, f"malformed record at seq {expected_seq}{suffix}")
            if not _same_number(record.get("seq"), expected_seq):
                return _answer(
                    False,
                    checked,
                    expected_seq,
                    f"sequence mismatch — record carries seq {record.get('seq')}, expected {expected_seq}{suffix}",
                )
            if record.get("prevHash") != running:
                return _answer(
                    False,
                    checked,
                    expected_seq,
                    f"chain broken — prevHash does not match the previous record's hash{suffix}",
                )
            if record_hash(record) != record.get("hash"):
                return _answer(
                    False,
                    checked,
                    expected_seq,
                    f"hash mismatch — record content does not match its hash (tampered or corrupted){suffix}",
                )
            running = record["hash"]
            checked += 1
        if segment["finalHash"] != running:
            last = first_seq + len(records) - 1 if records else first_seq
            return _answer(False, checked, last, f"finalHash does not match the last record's hash{suffix}")
        previous, next_seq = segment, first_seq + len(records)
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
