"""Reads of audit bundles: the verdict on a body (stored or not), and the stored bundles."""

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Case, When

from footprint_site.exceptions import MalformedBody
from footprint_site.lib.jsonbody import parse_json_keeping_lone_surrogates, text_copy
from footprint_site.pagination import Page, keyset_page
from ledger.audits.receipts import receipt_signature_matches
from ledger.audits.verify import LIBRARY, ZERO_HASH, build_bundle, verify_bundles, whole_number
from ledger.exceptions import AuditBundleInvalid
from ledger.models import AuditBundle, Run, RunEvent, RunTombstone
from tenancy.models import Project
from tenancy.selectors import projects_for_user


@dataclass
class BundleCheck:
    segments: list[dict[str, Any]]
    verdict: dict[str, Any]
    previous: AuditBundle | None  # the stored bundle this one continues, if any


def _unwrapped(document: Any) -> Any:
    """The server also takes drained segments as {segments: [...]}; the framework reads the list."""
    if isinstance(document, dict) and "segments" in document and "header" not in document:
        return document["segments"]
    return document


def _segments_of(document: Any, reason: str = "") -> list[dict[str, Any]]:
    segments = document if isinstance(document, list) else [document]
    if not segments or not all(isinstance(s, dict) and isinstance(s.get("header"), dict) for s in segments):
        # Nothing here to store; the framework's reason (if it gave one) is quoted word for word.
        raise AuditBundleInvalid(
            (f"verifyAuditBundle: {reason}. " if reason else "")
            + "The body is an agentfootprint.audit/1 bundle {header, records, finalHash}, a list of drained "
            "segments in order, or {segments: [...]}."
        )
    return segments


MAX_PREDECESSOR_CANDIDATES = 20  # copies of one segment compared; each costs a SHA-256 of its body


def audit_bundle_verdict(*, project: Project, body: bytes, checking: frozenset[int] = frozenset()) -> BundleCheck:
    """The framework's `verifyAuditBundle` answer plus `continuity`: how the first segment joins
    the chain already stored for this project: `genesis` (it starts a chain), `continues` (its
    chainHead is a stored bundle's finalHash and its firstSeq follows on; `predecessorValid` says
    whether that bundle's own verdict is valid), or `unanchored` (its
    predecessor was never imported here), or `broken` (its chainHead is a stored bundle's finalHash
    but its firstSeq does not follow on: `expectedFirstSeq` says where that chain continues)."""
    document = _unwrapped(parse_json_keeping_lone_surrogates(body))
    try:
        verdict = verify_bundles(document)
    except RecursionError:
        raise AuditBundleInvalid("A record nests too deeply to canonicalize (afp-cjson/1 recursion limit).") from None
    segments = _segments_of(document, verdict.get("reason", ""))
    head, first_seq = segments[0]["header"].get("chainHead"), whole_number(segments[0]["header"].get("firstSeq"))
    previous, predecessor_valid = (
        _predecessor(project=project, head=head, first_seq=first_seq, body=body, checking=checking)
        if isinstance(head, str)
        else (None, False)
    )
    if head == ZERO_HASH:
        continuity: dict[str, Any] = {"state": "genesis"}
    elif previous is None:
        continuity = {"state": "unanchored"}
    else:
        expected = (previous.first_seq or 0) + previous.record_count
        # A valid segment after a broken one is still a broken chain: say which it follows.
        continuity = {"state": "continues", "bundleId": previous.pk, "predecessorValid": predecessor_valid}
        if first_seq != expected:
            # The server's finding, beside the framework's verdict and never inside it.
            continuity = {"state": "broken", "bundleId": previous.pk, "expectedFirstSeq": expected}
    # The reason may quote the bundle's values: as text any page, column or answer can hold.
    return BundleCheck(segments, text_copy({**verdict, "continuity": continuity}), previous)


def _predecessor(
    *, project: Project, head: str, first_seq: int | None, body: bytes, checking: frozenset[int]
) -> tuple[AuditBundle | None, bool]:
    """The stored bundle whose finalHash is this chainHead, and whether its own verdict is valid.

    Copies may share a finalHash (a tampered or truncated copy keeps the sound one's): the sound
    one this segment's firstSeq follows wins, then any sound one, then the latest; those whose
    verdict at import was valid are read first, so copies stored later cannot crowd them out.
    Never the bundle itself (an empty segment's chainHead is its own finalHash), nor one being
    verified further up (`checking`: an edited stored body is verified again, and edited columns
    could otherwise lead a lookup round in a circle).
    """
    candidates = (
        AuditBundle.objects.filter(project=project, final_hash=text_copy(head))
        .exclude(sha256=hashlib.sha256(body).digest())
        .exclude(pk__in=checking)
        .order_by(Case(When(verdict__valid=True, then=0), default=1), "-id")[:MAX_PREDECESSOR_CANDIDATES]
    )
    ranked = []
    for candidate in candidates:
        valid = audit_bundle_stored_verdict(bundle=candidate, checking=checking)[0].get("valid") is True
        follows = (candidate.first_seq or 0) + candidate.record_count == first_seq
        ranked.append(((valid and follows, valid), candidate))
    if not ranked:
        return None, False
    (_, valid), best = max(ranked, key=lambda item: item[0])  # the first, so the latest, of equals
    return best, valid


def audit_bundle_broken_record(*, body: bytes, verdict: dict[str, Any]) -> dict[str, Any] | None:
    """The record the verdict names (`brokenAt` is a seq), to show what was found wrong."""
    broken_at = verdict.get("brokenAt")
    if verdict.get("valid") or not isinstance(broken_at, int):
        return None
    for segment in _segments_of(_unwrapped(parse_json_keeping_lone_surrogates(body))):
        for record in segment.get("records") or []:
            if isinstance(record, dict) and record.get("seq") == broken_at:
                return text_copy(record)  # shown on a page
    return None


def audit_bundle_stored_verdict(
    *, bundle: AuditBundle, checking: frozenset[int] = frozenset()
) -> tuple[dict[str, Any], bool]:
    """The verdict to show for a stored bundle, and whether its body changed since it was imported.

    The import's verdict stands while the body still has the SHA-256 it arrived with; a body
    edited in the database since is verified again, so a page never vouches for bytes it did not check.
    """
    body = bytes(bundle.body)
    if hashlib.sha256(body).digest() == bytes(bundle.sha256):
        return bundle.verdict, False
    try:
        verdict = audit_bundle_verdict(project=bundle.project, body=body, checking=checking | {bundle.pk}).verdict
    except (MalformedBody, AuditBundleInvalid) as exc:
        verdict = {"valid": False, "recordsChecked": 0, "reason": f"the stored body is no longer a bundle: {exc}"}
    return {**verdict, "continuity": bundle.verdict.get("continuity", {})}, True


def audit_bundles_for_user(
    *, user: User | AnonymousUser, cursor: str | None = None, limit: int = 100
) -> Page[AuditBundle]:
    """A page of stored bundles of the user's projects, newest first, keyset-paged by id."""
    bundles = AuditBundle.objects.filter(project__in=projects_for_user(user)).select_related("project")
    return keyset_page(bundles.defer("body"), order="-id", cursor=cursor, limit=limit)


def audit_bundle_get_for_user(*, user: User | AnonymousUser, bundle_id: int) -> AuditBundle | None:
    return (
        AuditBundle.objects.filter(project__in=projects_for_user(user), pk=bundle_id).select_related("project").first()
    )


def run_audit_bundle(*, run: Run) -> dict[str, Any]:
    """The run's ledger as an `agentfootprint.audit/1` bundle (payloads verbatim) that the
    framework's `verifyAuditBundle` accepts: a genesis record, then every stored event in store
    order, server-authored decisions included."""
    events = RunEvent.objects.of_run(run).order_by("position").values_list("body", "received_at")
    records: list[dict[str, Any]] = []
    for body, received_at in events.iterator(chunk_size=2000):
        event = orjson.loads(body)
        meta = dict(event.get("meta") or {})
        wall = meta.pop("wallClockMs", None)
        record: dict[str, Any] = {
            "timestamp": wall if isinstance(wall, int | float) else int(received_at.timestamp() * 1000),
            "eventType": event.get("type"),
        }
        if "payload" in event:
            record["payload"] = event["payload"]
        record["meta"] = {**meta, "runId": run.run_id}
        records.append(record)
    genesis = {
        "timestamp": records[0]["timestamp"] if records else int(time.time() * 1000),
        "eventType": "audit.genesis",
        "payload": {"runId": run.run_id, "library": LIBRARY, "payloadMode": "verbatim"},
        "meta": {"runId": run.run_id},
    }
    return build_bundle([genesis, *records], exported_at=int(time.time() * 1000))


RECEIPTS_PER_CHECK = 1000


def receipts_check(*, project: Project, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each receipt held against the chain: `held` (the chain still reaches its head at its record
    count), `tail removed`, `rewritten`, `removed by retention`, `run deleted` or `not ours` (the
    signature is not this server's, so the receipt proves nothing)."""
    runs = {
        run.run_id: run
        for run in Run.objects.filter(project=project, run_id__in={str(r.get("runId")) for r in receipts})
    }
    return [_receipt_verdict(project, receipt, runs.get(str(receipt.get("runId")))) for receipt in receipts]


def _receipt_verdict(project: Project, receipt: dict[str, Any], run: Run | None) -> dict[str, Any]:
    run_id, records, head, signature = (receipt.get(key) for key in ("runId", "records", "head", "signature"))
    answer: dict[str, Any] = {"runId": run_id, "records": records}
    if not (
        isinstance(run_id, str)
        and isinstance(records, int)
        and isinstance(head, str)
        and isinstance(signature, str)
        and receipt_signature_matches(
            project_slug=project.slug, run_id=run_id, records=records, head_hex=head, signature=signature
        )
    ):
        return {
            **answer,
            "verdict": "not ours",
            "reason": "This receipt's signature is not this server's for this project (or FOOTPRINT_ANCHOR_KEY "
            "changed since): it proves nothing about the chain.",
        }
    if run is None:
        stone = RunTombstone.objects.filter(project=project, run_id=run_id).order_by("-removed_at").first()
        if stone is not None and stone.chain_length >= records:
            return {
                **answer,
                "verdict": "removed by retention",
                "reason": f"Retention removed the run with "
                f"{stone.chain_length} records on {stone.removed_at:%Y-%m-%d}; its archive is checked on its page.",
            }
        return {
            **answer,
            "verdict": "run deleted",
            "reason": f"The server signed {records} records of this run, "
            "and the run is gone without retention having removed it: it was deleted behind the server's back.",
        }
    if run.chain_length < records:
        return {
            **answer,
            "verdict": "tail removed",
            "reason": f"The server signed {records} records of this run; its chain now has {run.chain_length}: "
            f"the last {records - run.chain_length} were removed.",
        }
    stored = RunEvent.objects.of_run(run).filter(position=records - 1).values_list("hash", flat=True).first()
    if stored is None or bytes(stored).hex() != head:
        return {
            **answer,
            "verdict": "rewritten",
            "reason": f"Record {records - 1} of the chain no longer has the head this receipt names: the chain "
            "was rewritten up to it.",
        }
    return {**answer, "verdict": "held", "reason": f"The chain still reaches this head at record {records - 1}."}
