"""Import of audit bundles: verified with the framework's algorithm, stored byte for byte."""

import hashlib
from typing import Any

from django.db import transaction

from ledger.envelopes import replace_nul
from ledger.models import AuditBundle, Project
from ledger.selectors_audits import audit_bundle_verdict


def _run_ids(segments: list[dict[str, Any]]) -> list[str]:
    ids = {
        r.get("meta", {}).get("runId")
        for s in segments
        for r in (s.get("records") or [])
        if isinstance(r, dict) and isinstance(r.get("meta"), dict)
    }
    return sorted(replace_nul(i) for i in ids if isinstance(i, str))


@transaction.atomic
def audit_bundle_import(*, project: Project, body: bytes) -> tuple[AuditBundle, bool]:
    """Verify a bundle (or segments in order) and keep the body exactly as received.

    Re-importing the same bytes stores nothing. See `audit_bundle_verdict` for the verdict.
    """
    checked = audit_bundle_verdict(project=project, body=body)
    segments, first_seq = checked.segments, checked.segments[0]["header"].get("firstSeq")
    return AuditBundle.objects.get_or_create(
        project=project,
        sha256=hashlib.sha256(body).digest(),
        defaults={
            "body": body,
            "segment_count": len(segments),
            "first_seq": first_seq if isinstance(first_seq, int) else None,
            "record_count": sum(len(s.get("records") or []) for s in segments),
            # Searchable copies only (the body keeps the bytes): text columns cannot hold U+0000.
            "chain_head": replace_nul(str(segments[0]["header"].get("chainHead") or "")),
            "final_hash": replace_nul(str(segments[-1].get("finalHash") or "")),
            "run_ids": _run_ids(segments),
            "continues": checked.previous,
            "verdict": checked.verdict,
        },
    )
