"""The JSON API under /api/v1: agent keys in, `{error, code}` sentences out when anything is wrong."""

from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError
from ninja.renderers import BaseRenderer

from footprint_site.auth import AuthThrottled, ScopeMissing
from footprint_site.exceptions import ApiError
from footprint_site.responses import json_response
from footprint_site.schemas import BodyInvalid
from tenancy.models import AgentKey


class OrjsonRenderer(BaseRenderer):
    """orjson, as `json_response` writes: the same bytes, and stored JSON text (orjson.Fragment)
    that an answer carries is written verbatim."""

    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return orjson.dumps(data)


api = NinjaAPI(
    renderer=OrjsonRenderer(),
    title="Footprint ledger",
    version="1",
    urls_namespace="api",
    description=(
        "Evidence of agentfootprint runs: typed events, recordings, asks and artifacts. Every operation "
        "takes an agent key, `Authorization: Bearer afk_…`, carrying the scope its security scheme names "
        "(`ingest`, `artifacts`, `asks`, `read`; `decide` for integrations that decide asks; `admin` for "
        "a project admin's own key). Errors are "
        "`{error, code}`: a sentence and a stable code."
    ),
)
for room in ("ingest", "explorer", "asks", "audits"):
    api.add_router("/", f"ledger.{room}.api.router")
api.add_router("/", "ledger.asks.admin_api.router")
api.add_router("/artifacts", "artifacts.api.router")
api.add_router("/", "artifacts.api.store_router")
if settings.FOOTPRINT_TEST_HOOKS:
    api.add_router("/testing", "artifacts.testing_api.router")


@api.exception_handler(ApiError)
def ledger_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return json_response({"error": exc.message, "code": exc.code, **exc.details}, status=exc.status)


@api.exception_handler(AuthenticationError)
def missing_key(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = json_response(
        {
            "error": "Send a valid agent key as 'Authorization: Bearer <key>'. Keys are created with "
            "`python manage.py create_agent_key --project <slug>`.",
            "code": "ERR_UNAUTHENTICATED",
        },
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="footprint"'
    return response


@api.exception_handler(AuthThrottled)
def too_many_failures(request: HttpRequest, exc: AuthThrottled) -> HttpResponse:
    response = json_response(
        {
            "error": f"Too many failed key checks from this address; try again in {exc.retry_after} s.",
            "code": "ERR_RATE_LIMITED",
        },
        status=429,
    )
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(ScopeMissing)
def scope_missing(request: HttpRequest, exc: ScopeMissing) -> HttpResponse:
    needed = " or ".join(f"'{scope}'" for scope in exc.scopes)
    message = f"This agent key lacks the {needed} scope this operation needs."
    if exc.scopes == (AgentKey.Scope.DECIDE,):
        message += (
            " Agents do not decide their own asks: people decide at /inbox/, integrations with a key of"
            " their own (manage.py create_agent_key --project <slug> --scopes decide)."
        )
    return json_response({"error": message, "code": "ERR_SCOPE"}, status=403)


def _field(error: dict[str, Any]) -> str:
    name = ".".join(str(p) for p in error.get("loc", ()))
    return f"{name} (not a field of this body)" if error.get("type") == "extra_forbidden" else name


@api.exception_handler(ValidationError)
def invalid_parameters(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Every input that does not fit its schema, parameters or body: one `{error, code, detail}`
    answer naming the fields; a body's carries its operation's own code (ERR_INVALID_ASK, …)."""
    fields = ", ".join(_field(e) for e in exc.errors)
    if isinstance(exc, BodyInvalid):
        body = {"error": f"Invalid body: {fields}.", "code": exc.code, "detail": exc.errors}
        return json_response(body, status=exc.status)
    return json_response(
        {
            "error": f"Invalid request parameters: {fields}.",
            "code": "ERR_INVALID_PARAMETERS",
            "detail": exc.errors,
        },
        status=422,
    )
