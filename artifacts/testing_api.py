"""Test hooks, mounted only when FOOTPRINT_TEST_HOOKS=1 (never in production): they let the
framework's own 19-case conformance battery drive this server unchanged."""

import secrets
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router

from artifacts import services
from artifacts.exceptions import ArtifactNotFound
from artifacts.scopes import scope_from_json
from footprint_site.auth import AgentKeyAuth, project_of
from footprint_site.lib.jsonbody import parse_json
from footprint_site.responses import json_response
from tenancy.models import AgentKey
from tenancy.services import agent_key_create, project_get_or_create

router = Router(tags=["testing"])


@router.post("/stores", auth=None)
def create_test_store(request: HttpRequest) -> HttpResponse:
    """A fresh project with an empty store (optionally byte-bounded) and a key for it."""
    document = parse_json(request.body or b"{}")
    project = project_get_or_create(slug=f"conformance-{secrets.token_hex(6)}")
    store = services.store_for_project(project=project)
    budget = document.get("maxBytesPerScope") if isinstance(document, dict) else None
    if isinstance(budget, int) and budget > 0:
        store.max_bytes_per_scope = budget
        store.save(update_fields=["max_bytes_per_scope"])
    _, key = agent_key_create(project=project, scopes=list(AgentKey.Scope.values))
    return json_response({"key": key, "project": project.slug}, status=201)


@router.post("/clock", auth=AgentKeyAuth("artifacts"))
def advance_test_clock(request: HttpRequest) -> HttpResponse:
    document: Any = parse_json(request.body)
    advance = document.get("advanceMs") if isinstance(document, dict) else None
    if not isinstance(advance, int) or advance < 0:
        return json_response({"error": "advanceMs must be a non-negative integer.", "code": "ERR_INVALID"}, 422)
    now = services.store_advance_clock(
        store=services.store_for_project(project=project_of(request)), advance_ms=advance
    )
    return json_response({"now": now})


@router.post("/corrupt", auth=AgentKeyAuth("artifacts"))
def corrupt_test_artifact(request: HttpRequest) -> HttpResponse:
    document: Any = parse_json(request.body)
    if not isinstance(document, dict):
        return json_response({"error": "The body is {scope, ref}.", "code": "ERR_INVALID"}, 422)
    store = services.store_for_project(project=project_of(request))
    if not services.artifact_corrupt(
        store=store, scope=scope_from_json(document.get("scope")), ref=str(document.get("ref"))
    ):
        raise ArtifactNotFound("No such artifact to corrupt.")
    return HttpResponse(status=204)
