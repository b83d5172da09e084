"""The artifact port over HTTP (agent keys with the `artifacts` scope; scope in `AF-Scope`)."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status

from artifacts import selectors, services
from artifacts.exceptions import ArtifactBodyTooLarge, InvalidArtifact, InvalidWants
from artifacts.models import ArtifactStore
from artifacts.payloads import payload_out
from artifacts.schemas import (
    ArtifactListOut,
    ArtifactOut,
    ArtifactPutIn,
    CapabilitiesOut,
    MetaOut,
    PutOut,
    ResolveOut,
)
from artifacts.scopes import Scope, scope_from_header
from artifacts.wants import wants_resolve
from footprint_site.auth import AgentKeyAuth, project_of
from footprint_site.exceptions import BodyTooLarge
from footprint_site.http import body_within
from footprint_site.lib.jsonbody import parse_json_encoded_as_javascript
from footprint_site.schemas import ERRORS, body_fields

router = Router(tags=["artifacts"], auth=AgentKeyAuth("artifacts"))  # /api/v1/artifacts: the spec's /af/v1/artifacts
# The spec's /af/v1/capabilities and /af/v1/wants:resolve, beside /artifacts rather than under it,
# where they would shadow refs: `GET /artifacts/resolve` must be the 404 of any other non-ref.
store_router = Router(tags=["artifacts"], auth=AgentKeyAuth("artifacts"))
SCOPE_HEADER = {
    "parameters": [
        {
            "in": "header",
            "name": "AF-Scope",
            "required": True,
            "schema": {"type": "string"},
            "description": 'base64url of the UTF-8 JSON {"tenant"?, "principal"?, "conversationId"}',
        }
    ]
}


def _store(request: HttpRequest) -> ArtifactStore:
    return services.store_for_project(project=project_of(request))


def _store_and_scope(request: HttpRequest) -> tuple[ArtifactStore, Scope]:
    """The scope first: a malformed AF-Scope is refused before the project's store is created."""
    scope = scope_from_header(request.headers.get("AF-Scope"))
    return _store(request), scope


def _json_body(request: HttpRequest) -> Any:
    """The body (BodyTooLarge past FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES)."""
    return parse_json_encoded_as_javascript(body_within(request, settings.FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES))


# Metas leave out what an artifact does not have (label, expiresAt, …) rather than answer null.
@router.post("", response={201: PutOut, **ERRORS}, openapi_extra=SCOPE_HEADER, exclude_unset=True)
def put_artifact(request: HttpRequest) -> Status[dict[str, Any]]:
    """Mint an artifact. `payload.value` is the text, the exact JSON text, or base64 bytes."""
    try:
        document = _json_body(request)
    except BodyTooLarge as exc:  # the store's own refusal, as the framework words a put's
        limit = exc.details["limit"]
        raise ArtifactBodyTooLarge(
            f"[artifacts] put refused: a request body may be at most {limit} bytes. Store the payload "
            "in smaller artifacts, or raise FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES.",
            limit=limit,
        ) from None
    if not isinstance(document, dict):
        raise InvalidArtifact("the body must be a JSON object {kind, mediaType, payload, …}.")
    fields = body_fields(ArtifactPutIn, document, code=InvalidArtifact.code)
    spec = services.PutInput(
        kind=fields.kind,
        media_type=fields.mediaType,
        payload=fields.payload,
        label=fields.label,
        digest=fields.digest,
        expires_at=fields.expiresAt,
        origin=fields.origin,
        parent_refs=fields.parentRefs,
        present=set(fields.model_fields_set),
    )
    store, scope = _store_and_scope(request)
    meta, swept = services.artifact_put(store=store, scope=scope, spec=spec)
    return Status(201, {"meta": meta, "swept": [s.as_json() for s in swept]})


@store_router.get("/capabilities", response={200: CapabilitiesOut, **ERRORS}, exclude_unset=True)
def get_capabilities(request: HttpRequest) -> dict[str, Any]:
    """What this store does. Streaming is absent: payloads live inline in PostgreSQL."""
    store = _store(request)
    retention = {
        key: value
        for key, value in (
            ("ttlMs", store.ttl_ms),
            ("maxTtlMs", store.max_ttl_ms),
            ("maxBytesPerScope", store.max_bytes_per_scope),
            ("maxCountPerScope", store.max_count_per_scope),
        )
        if value is not None
    }
    return {
        "putStream": False,
        "getStream": False,
        "maxListLimit": selectors.MAX_LIST_LIMIT,
        "defaultListLimit": selectors.DEFAULT_LIST_LIMIT,
        "retention": retention,
        "evictionOrder": "oldest",
        "digestAlgorithms": ["sha-256"],
        "payloadShapes": ["text", "json", "binary"],
        "maxRequestBytes": settings.FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES,
        "resolve": True,
    }


@store_router.post(
    "/wants:resolve", response={200: ResolveOut, **ERRORS}, openapi_extra=SCOPE_HEADER, exclude_unset=True
)
def resolve_wants(request: HttpRequest) -> dict[str, Any]:
    """Resolve a tool's `wants` exactly as the framework's dispatch does, refusals word for word."""
    document = _json_body(request)
    if not isinstance(document, dict) or not isinstance(document.get("toolName"), str):
        raise InvalidWants("The body is {toolName, wants, args, inputSchema?}.")
    store, scope = _store_and_scope(request)
    result = wants_resolve(
        store=store,
        scope=scope,
        tool_name=document["toolName"],
        wants=document.get("wants"),
        args=document.get("args"),
        input_schema=document.get("inputSchema"),
    )
    return result


@router.get("", response={200: ArtifactListOut, **ERRORS}, openapi_extra=SCOPE_HEADER, exclude_unset=True)
def list_artifacts(
    request: HttpRequest, limit: float | None = Query(None, allow_inf_nan=False), cursor: str | None = None
) -> dict[str, Any]:
    """The scope's live artifacts, newest first, metadata only (limit rounded down, 1 to 200; opaque cursor)."""
    store, scope = _store_and_scope(request)
    page, next_cursor = selectors.artifact_list(store=store, scope=scope, limit=limit, cursor=cursor)
    body: dict[str, Any] = {"artifacts": [a.meta() for a in page]}
    if next_cursor:
        body["cursor"] = next_cursor
    return body


@router.get("/{ref}/meta", response={200: MetaOut, **ERRORS}, openapi_extra=SCOPE_HEADER, exclude_unset=True)
def head_artifact(request: HttpRequest, ref: str) -> dict[str, Any]:
    store, scope = _store_and_scope(request)
    artifact = selectors.artifact_head(store=store, scope=scope, ref=ref)
    return {"meta": artifact.meta()}


@router.get("/{ref}", response={200: ArtifactOut, **ERRORS}, openapi_extra=SCOPE_HEADER, exclude_unset=True)
def get_artifact(request: HttpRequest, ref: str) -> dict[str, Any]:
    """Meta and payload; refuses (500 ERR_ARTIFACT_INTEGRITY) bytes that no longer match their digest."""
    store, scope = _store_and_scope(request)
    artifact, body = selectors.artifact_get(store=store, scope=scope, ref=ref)
    return {"meta": artifact.meta(), "payload": payload_out(artifact.payload_shape, body)}


@router.delete("/{ref}", response={204: None, **ERRORS}, openapi_extra=SCOPE_HEADER)
def delete_artifact(request: HttpRequest, ref: str) -> HttpResponse:
    store, scope = _store_and_scope(request)
    services.artifact_delete(store=store, scope=scope, ref=ref)
    return HttpResponse(status=204)
