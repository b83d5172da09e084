"""Import of audit bundles: verified with the framework's algorithm, stored byte for byte."""

import hashlib
from typing import Any

from django.db import transaction

from footprint_site.lib.jsonbody import text_copy
from ledger.audits.selectors import audit_bundle_verdict
from ledger.audits.verify import whole_number
from ledger.models import AuditBundle
from tenancy.models import Project


def _records(segment: dict[str, Any]) -> list[Any]:
    """A segment's records; a bundle stored with an invalid verdict may have none, or not a list."""
    records = segment.get("records")
    return records if isinstance(records, list) else []


def _run_ids(segments: list[dict[str, Any]]) -> list[str]:
    ids = {
        r.get("meta", {}).get("runId")
        for s in segments
        for r in _records(s)
        if isinstance(r, dict) and isinstance(r.get("meta"), dict)
    }
    return sorted(text_copy(i) for i in ids if isinstance(i, str))


@transaction.atomic
def audit_bundle_import(*, project: Project, body: bytes) -> tuple[AuditBundle, bool]:
    """Verify a bundle (or segments in order) and keep the body exactly as received.

    Re-importing the same bytes stores nothing new, but answers as of now: a segment sent again
    once its predecessor has arrived continues it. See `audit_bundle_verdict` for the verdict.
    """
    checked = audit_bundle_verdict(project=project, body=body)
    segments, first_seq = checked.segments, whole_number(checked.segments[0]["header"].get("firstSeq"))
    verdict = checked.verdict  # as text columns and pages hold it (see audit_bundle_verdict)
    bundle, created = AuditBundle.objects.get_or_create(
        project=project,
        sha256=hashlib.sha256(body).digest(),
        defaults={
            "body": body,
            "segment_count": len(segments),
            "first_seq": first_seq,
            "record_count": sum(len(_records(s)) for s in segments),
            # Searchable copies only (the body keeps the bytes): text columns cannot hold U+0000
            # or a lone surrogate.
            "chain_head": text_copy(str(segments[0]["header"].get("chainHead") or "")),
            "final_hash": text_copy(str(segments[-1].get("finalHash") or "")),
            "run_ids": _run_ids(segments),
            "continues": checked.previous,
            "verdict": verdict,
        },
    )
    if not created and (bundle.continues_id, bundle.verdict) != (getattr(checked.previous, "pk", None), verdict):
        bundle.continues, bundle.verdict = checked.previous, verdict
        bundle.save(update_fields=["continues", "verdict"])
    return bundle, created
