"""OTLP/HTTP trace export (`POST /v1/traces`): what an OpenTelemetry exporter sends to a collector.

Answers as the OTLP/HTTP spec says: 200 with an ExportTraceServiceResponse (in the request's
encoding, `partialSuccess` when spans were rejected), 400 for a body that does not decode, 401
without a valid agent key, 403 for a key without the `ingest` scope, 413 over the size limit
(before and after gunzip), 415 for other content types or encodings. Error bodies are
google.rpc.Status messages.
"""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from footprint_site.auth import AuthThrottled, client_address, verified_key
from footprint_site.exceptions import ApiError
from footprint_site.http import body_within
from ledger.otlp import wire
from ledger.otlp.services import otlp_ingest
from tenancy.models import AgentKey


def _agent_key(request: HttpRequest) -> AgentKey | None:
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return verified_key(secret.strip(), client_address(request))


# The endpoint is authenticated only by the agent key in the Authorization header, never by a
# session cookie, so a cross-site request carries no credentials: CSRF has nothing to forge.
@csrf_exempt
@require_POST
def export_traces(request: HttpRequest) -> HttpResponse:
    answer_type = wire.answer_type(request.content_type)
    as_json = answer_type == wire.JSON
    try:
        key = _agent_key(request)
    except AuthThrottled as exc:
        response = error_response(request, 429, f"Too many failed key checks; try again in {exc.retry_after} s.")
        response["Retry-After"] = str(exc.retry_after)
        return response
    if key is None:
        response = error_response(request, 401, "Send a valid agent key as 'Authorization: Bearer <key>'.")
        response["WWW-Authenticate"] = 'Bearer realm="footprint"'
        return response
    if AgentKey.Scope.INGEST not in key.scopes:
        return error_response(request, 403, "This agent key lacks the 'ingest' scope.")
    if request.content_type not in wire.CONTENT_TYPES:
        return error_response(
            request, 415, f"Content-Type must be {wire.PROTOBUF} or {wire.JSON}, not {request.content_type!r}."
        )
    encoding = request.headers.get("Content-Encoding", "").strip().lower() or "identity"
    if encoding not in ("identity", "gzip"):
        return error_response(request, 415, f"Content-Encoding must be gzip or absent, not {encoding!r}.")
    limit = settings.FOOTPRINT_MAX_REQUEST_BYTES
    try:
        body = wire.read_body(body_within(request, limit, json=False), gzipped=encoding == "gzip", limit=limit)
        spans = wire.decode_spans(body, as_json=as_json)
        # A trace's run that native events took before `otlp-` was OTLP's alone: 409.
        receipt = otlp_ingest(project=key.project, spans=spans, key=key)
    except ApiError as exc:  # 400 undecodable, 411 unsized, 413 too large, 409
        return error_response(request, exc.status, exc.message)
    body = wire.export_response(rejected=receipt.rejected, message=receipt.message, as_json=as_json)
    return HttpResponse(body, content_type=answer_type)


def error_response(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """A google.rpc.Status answer in the request's encoding: the endpoint's own refusals, and the
    middlewares' (a 422 for the URL, the 503 of an unreachable database)."""
    content_type = wire.answer_type(request.content_type)
    body = wire.error_body(http_status=status, message=message, as_json=content_type == wire.JSON)
    return HttpResponse(body, status=status, content_type=content_type)
