"""The agents' read path (head, get, resolve): its statements, prepared, and the store row read afresh."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from artifacts.models import ArtifactStore
from artifacts.scopes import scope_header
from footprint_site import auth
from tests.artifacts.conftest import API, RESOLVE

pytestmark = pytest.mark.django_db

SCOPE = {"tenant": "t", "principal": "p", "conversationId": "reads"}
HEADERS = {"AF-Scope": scope_header(SCOPE)}


@pytest.fixture
def stored(agent_client: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ref of one stored artifact; the agent's key stays verified so it costs no query below."""
    monkeypatch.setattr(auth, "KEY_CACHE_SECONDS", 3600.0)
    document: dict[str, Any] = {"kind": "dataset/rows", "mediaType": "application/json", "digest": "sha-256"}
    document["payload"] = {"shape": "json", "value": '{"rows":[1,2]}'}
    response = agent_client.post(API, document, content_type="application/json", headers=HEADERS)
    assert response.status_code == 201, response.content
    return str(response.json()["meta"]["ref"])


@contextmanager
def statements_sent() -> Iterator[list[str]]:
    """Every statement sent inside the block: the read path's prepared cursor is not Django's
    debug cursor, so assertNumQueries does not see it; execute wrappers see every statement."""
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


def test_head_get_and_resolve_each_cost_the_store_row_and_the_artifact_row(agent_client: Any, stored: str) -> None:
    """One SELECT of the store row, one of the artifact row (with its payload, for get and resolve)."""
    with statements_sent() as sent:
        response = agent_client.get(f"{API}/{stored}/meta", headers=HEADERS)
    assert response.status_code == 200, response.content
    assert len(sent) == 2, sent
    assert response.json()["meta"]["ref"] == stored
    with statements_sent() as sent:
        response = agent_client.get(f"{API}/{stored}", headers=HEADERS)
    assert response.status_code == 200, response.content
    assert len(sent) == 2, sent
    assert response.json()["payload"] == {"shape": "json", "value": '{"rows":[1,2]}'}
    resolve = {"toolName": "chart", "wants": {"dataset": "dataset/rows"}, "args": {"dataset": stored}}
    with statements_sent() as sent:
        response = agent_client.post(RESOLVE, resolve, content_type="application/json", headers=HEADERS)
    assert response.status_code == 200, response.content
    assert len(sent) == 2, sent
    assert response.json()["args"] == {"dataset": {"rows": [1, 2]}}


def test_the_read_statements_are_prepared_once_they_repeat(agent_client: Any, stored: str) -> None:
    """Planning the get's payload lookup across the daily partitions cost more than running it:
    psycopg prepares the read path's statements on their 5th run (settings: prepare_threshold)."""
    for _ in range(6):
        assert agent_client.get(f"{API}/{stored}/meta", headers=HEADERS).status_code == 200
        assert agent_client.get(f"{API}/{stored}", headers=HEADERS).status_code == 200

    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cur.fetchall()]
    assert any("FROM artifacts_artifactstore WHERE project_id" in statement for statement in prepared), prepared
    assert any("SELECT p.body FROM artifacts_payload p" in statement for statement in prepared), prepared
    assert sum("FROM artifacts_artifact WHERE store_id" in statement for statement in prepared) == 2, prepared


def test_a_read_sees_the_stores_clock_as_edited_just_before_it(agent_client: Any, project: Any, stored: str) -> None:
    """The store row is read on every request, never kept: an edit applies to the very next read."""
    meta = agent_client.get(f"{API}/{stored}/meta", headers=HEADERS).json()["meta"]
    ArtifactStore.objects.filter(project=project).update(clock_offset_ms=meta["expiresAt"] - meta["createdAt"])
    for path in (f"{API}/{stored}/meta", f"{API}/{stored}"):
        response = agent_client.get(path, headers=HEADERS)
        assert response.status_code == 404, response.content
        assert response.json()["code"] == "ERR_ARTIFACT_NOT_FOUND"


def test_a_projects_first_request_being_a_read_creates_its_store(agent_client: Any, project: Any) -> None:
    assert not ArtifactStore.objects.filter(project=project).exists()
    response = agent_client.get(f"{API}/art_{'z' * 22}/meta", headers=HEADERS)
    assert response.status_code == 404, response.content
    assert ArtifactStore.objects.filter(project=project).exists()
