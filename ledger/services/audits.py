"""Import of audit bundles: verified with the framework's algorithm, stored byte for byte."""

import hashlib
from typing import Any

from django.db import transaction

from ledger.audit import ZERO_HASH, verify_bundles
from ledger.envelopes import parse_json
from ledger.exceptions import LedgerError
from ledger.models import AuditBundle, Project


class AuditBundleInvalid(LedgerError):
    status = 422
    code = "ERR_INVALID_AUDIT_BUNDLE"


def _segments_of(document: Any) -> list[Any]:
    if isinstance(document, dict) and "segments" in document and "header" not in document:
        document = document["segments"]
    segments = document if isinstance(document, list) else [document]
    if not segments or not all(isinstance(s, dict) and isinstance(s.get("header"), dict) for s in segments):
        raise AuditBundleInvalid(
            "The body is an agentfootprint.audit/1 bundle {header, records, finalHash}, a list of drained "
            "segments in order, or {segments: [...]}."
        )
    return segments


def _run_ids(segments: list[dict[str, Any]]) -> list[str]:
    ids = {
        r.get("meta", {}).get("runId")
        for s in segments
        for r in (s.get("records") or [])
        if isinstance(r, dict) and isinstance(r.get("meta"), dict)
    }
    return sorted(i for i in ids if isinstance(i, str))


@transaction.atomic
def audit_bundle_import(*, project: Project, body: bytes) -> tuple[AuditBundle, bool]:
    """Verify a bundle (or segments in order) and keep the body exactly as received.

    The verdict is the framework's `verifyAuditBundle` answer plus `continuity`: how the first
    segment joins the chain already stored for this project: `genesis` (it starts a chain),
    `continues` (its chainHead is a stored bundle's finalHash and its firstSeq follows on), or
    `unanchored` (its predecessor was never imported here). A firstSeq that does not follow the
    stored predecessor makes the verdict invalid. Re-importing the same bytes stores nothing.
    """
    segments = _segments_of(parse_json(body))
    verdict = verify_bundles(segments if len(segments) > 1 else segments[0])
    first, last = segments[0], segments[-1]
    head, first_seq = first["header"].get("chainHead"), first["header"].get("firstSeq")
    previous = AuditBundle.objects.filter(project=project, final_hash=head).order_by("-id").first()
    if head == ZERO_HASH:
        continuity: dict[str, Any] = {"state": "genesis"}
    elif previous is None:
        continuity = {"state": "unanchored"}
    else:
        expected = (previous.first_seq or 0) + previous.record_count
        continuity = {"state": "continues", "bundleId": previous.pk}
        if first_seq != expected:
            continuity = {"state": "broken", "bundleId": previous.pk}
            verdict = {
                "valid": False,
                "recordsChecked": 0,
                "brokenAt": expected,
                "reason": f"segment discontinuity — firstSeq {first_seq} does not follow the stored chain, "
                f"which continues at {expected}",
            }
    verdict = {**verdict, "continuity": continuity}
    return AuditBundle.objects.get_or_create(
        project=project,
        sha256=hashlib.sha256(body).digest(),
        defaults={
            "body": body,
            "segment_count": len(segments),
            "first_seq": first_seq if isinstance(first_seq, int) else None,
            "record_count": sum(len(s.get("records") or []) for s in segments),
            "chain_head": str(head or ""),
            "final_hash": str(last.get("finalHash") or ""),
            "run_ids": _run_ids(segments),
            "continues": previous,
            "verdict": verdict,
        },
    )
