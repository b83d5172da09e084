"""Audit bundles over the API: a run's chain verified, a bundle imported and verified as the
framework verifies it, a run exported as a bundle."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Router, Status

from footprint_site.auth import AgentKeyAuth, project_of
from footprint_site.exceptions import BodyTooLarge
from footprint_site.http import body_within
from footprint_site.lib.jsonbody import parse_json
from footprint_site.schemas import ERRORS, body_fields, json_body
from ledger.audits import integrity_selectors
from ledger.audits import selectors as audit_selectors
from ledger.audits.services import audit_bundle_import
from ledger.exceptions import ReceiptsInvalid
from ledger.explorer import selectors
from ledger.schemas import (
    AuditBundleOut,
    AuditBundleStoredOut,
    ReceiptsIn,
    ReceiptsOut,
    VerifyOut,
)

router = Router(tags=["audits"])


@router.get("/runs/{run_id}/verify", response={200: VerifyOut, **ERRORS}, auth=AgentKeyAuth("read"), exclude_unset=True)
def verify_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """Re-check the run's hash chain; names the first record whose stored content no longer matches."""
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    return integrity_selectors.run_chain_verify(run=run).as_json()


@router.post(
    "/audit-bundles",
    response={200: AuditBundleStoredOut, 201: AuditBundleStoredOut, **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=json_body({"description": "an agentfootprint.audit/1 bundle, or drained segments in order"}),
    exclude_unset=True,  # brokenAt and reason only for an invalid bundle
)
def import_audit_bundle(request: HttpRequest) -> Status[dict[str, Any]]:
    """Verify with the framework's algorithm and store byte for byte: {valid, recordsChecked, brokenAt?, reason?}."""
    bundle, created = audit_bundle_import(
        project=project_of(request), body=body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES)
    )
    return Status(201 if created else 200, {**bundle.verdict, "id": bundle.pk})


@router.get("/runs/{run_id}/audit-bundle", response={200: AuditBundleOut, **ERRORS}, auth=AgentKeyAuth("read"))
def export_audit_bundle(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """The run's ledger as an agentfootprint.audit/1 bundle that verifyAuditBundle accepts."""
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    return audit_selectors.run_audit_bundle(run=run)


RECEIPTS_SCHEMA = {
    "type": "object",
    "required": ["receipts"],
    "properties": {
        "receipts": {
            "type": "array",
            "items": {"type": "object", "description": "a receipt as POST /events answered it"},
        }
    },
    "additionalProperties": False,
}


@router.post(
    "/receipts/verify",
    response={200: ReceiptsOut, **ERRORS},
    auth=AgentKeyAuth("read"),
    openapi_extra=json_body(RECEIPTS_SCHEMA),
)
def verify_receipts(request: HttpRequest) -> dict[str, Any]:
    """Hold the receipts the events endpoint signed against the chain as it is now: a receipt whose
    head the chain no longer reaches shows records removed after it, between anchors included."""
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES))
    if not isinstance(document, dict):
        raise ReceiptsInvalid("The body is {receipts: [...]}, the receipts as POST /events answered them.")
    receipts = body_fields(ReceiptsIn, document, code=ReceiptsInvalid.code).receipts
    if len(receipts) > audit_selectors.RECEIPTS_PER_CHECK:
        raise BodyTooLarge(
            f"At most {audit_selectors.RECEIPTS_PER_CHECK} receipts per request; this one has {len(receipts)}."
        )
    return {"receipts": audit_selectors.receipts_check(project=project_of(request), receipts=receipts)}
