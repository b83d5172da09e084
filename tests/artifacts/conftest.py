"""An HTTP client for the artifact store and a harness mirroring the framework's TypeScript one.

`StoreClient` is the five verbs over HTTP (plus capabilities and wants resolution), written the way
a remote `httpArtifacts` adapter would be: only a 404 carrying `ERR_ARTIFACT_NOT_FOUND` becomes
`None`; every other non-success answer is raised as `StoreRefused` with the body's `code`.

`Harness` serves the conformance battery's hooks through the test-only endpoints under
/api/v1/testing (mounted because tests/conftest.py sets FOOTPRINT_TEST_HOOKS=1):
create_store(), bounded(max_bytes), advance(store, ms), corrupt(store, scope, ref), and the kit's
now(store), which reads the store's own clock with a put + delete of a clock probe.

`orm_put` / `orm_put_many` write artifacts straight through the ORM (metadata row + payload row),
for fixtures whose refs and createdAt values must be exactly the framework's.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from artifacts import partitions
from artifacts.models import Artifact, ArtifactStore
from artifacts.refs import mint_ref
from artifacts.scopes import Scope, scope_from_json, scope_header
from tenancy.models import Project

API = "/api/v1/artifacts"
RESOLVE = "/api/v1/wants:resolve"  # the spec's /af/v1/wants:resolve
CAPABILITIES = "/api/v1/capabilities"
TESTING = "/api/v1/testing"
REF_RE = re.compile(r"art_[A-Za-z0-9]{22}")
DIGEST_RE = re.compile(r"sha-256:[0-9a-f]{64}")


def js_json(value: Any) -> str:
    """What JavaScript's JSON.stringify writes for the plain values these tests use."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def envelope(data: Any) -> dict[str, str]:
    """The wire payload `{shape, value}` for a Python value, typed the way the framework types it."""
    if isinstance(data, bytes | bytearray):
        return {"shape": "binary", "value": base64.b64encode(bytes(data)).decode()}
    if isinstance(data, str):
        return {"shape": "text", "value": data}
    return {"shape": "json", "value": js_json(data)}


def decode_payload(payload: dict[str, Any]) -> Any:
    shape, value = payload["shape"], payload["value"]
    if shape == "binary":
        return base64.b64decode(value)
    if shape == "json":
        return json.loads(value)
    assert shape == "text", payload
    return value


def sha256_digest(body: bytes) -> str:
    return "sha-256:" + hashlib.sha256(body).hexdigest()


class StoreRefused(Exception):
    """A non-success answer from the store; `code` is the body's `code` (None when not JSON)."""

    def __init__(self, response: Any) -> None:
        self.status = response.status_code
        self.raw: bytes = response.content
        try:
            self.body: Any = json.loads(response.content)
        except ValueError:
            self.body = None
        self.code = self.body.get("code") if isinstance(self.body, dict) else None
        self.error = self.body.get("error") if isinstance(self.body, dict) else None
        super().__init__(f"HTTP {self.status}: {self.raw[:600]!r}")


@dataclass
class Record:
    meta: dict[str, Any]
    data: Any
    payload: dict[str, Any]


class StoreClient:
    """One store (one project, one agent key) spoken to over HTTP through django.test.Client.

    Not thread-safe by design: give every thread its own `clone()`.
    """

    def __init__(self, key: str, project_slug: str) -> None:
        self.key = key
        self.project_slug = project_slug
        self.http = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {key}")

    def clone(self) -> StoreClient:
        return StoreClient(self.key, self.project_slug)

    # --- ORM views of this store (for assertions) ---------------------------------------------
    @property
    def project(self) -> Project:
        return Project.objects.get(slug=self.project_slug)

    @property
    def model(self) -> ArtifactStore:
        return ArtifactStore.objects.get(project__slug=self.project_slug)

    # --- raw requests ---------------------------------------------------------------------------
    @staticmethod
    def _headers(scope: Any) -> dict[str, str]:
        if scope is None:
            return {}
        return {"AF-Scope": scope if isinstance(scope, str) else scope_header(scope)}

    def post(self, path: str, scope: Any, document: Any) -> Any:
        body = document if isinstance(document, bytes | str) else json.dumps(document)
        return self.http.post(path, body, content_type="application/json", headers=self._headers(scope))

    def get_path(self, path: str, scope: Any, query: dict[str, Any] | None = None) -> Any:
        return self.http.get(path, query or {}, headers=self._headers(scope))

    def put_raw(self, scope: Any, document: Any) -> Any:
        return self.post(API, scope, document)

    def head_raw(self, scope: Any, ref: str) -> Any:
        return self.get_path(f"{API}/{ref}/meta", scope)

    def get_raw(self, scope: Any, ref: str) -> Any:
        return self.get_path(f"{API}/{ref}", scope)

    def delete_raw(self, scope: Any, ref: str) -> Any:
        return self.http.delete(f"{API}/{ref}", headers=self._headers(scope))

    def list_raw(self, scope: Any, limit: Any = None, cursor: Any = None) -> Any:
        query = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return self.get_path(API, scope, query)

    def resolve_raw(
        self, scope: Any, tool_name: Any, wants: Any, args: Any, input_schema: Any = None, **extra: Any
    ) -> Any:
        document = {"toolName": tool_name, "wants": wants, "args": args, **extra}
        if input_schema is not None:
            document["inputSchema"] = input_schema
        return self.post(RESOLVE, scope, document)

    # --- the port ---------------------------------------------------------------------------------
    def put(
        self,
        scope: Any,
        *,
        kind: Any,
        media_type: Any,
        data: Any = None,
        payload: Any = None,
        label: Any = None,
        digest: Any = None,
        expires_at: Any = None,
        origin: Any = None,
        parent_refs: Any = None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        document: dict[str, Any] = {
            "kind": kind,
            "mediaType": media_type,
            "payload": payload if payload is not None else envelope(data),
        }
        for name, value in (
            ("label", label),
            ("digest", digest),
            ("expiresAt", expires_at),
            ("origin", origin),
            ("parentRefs", parent_refs),
        ):
            if value is not None:
                document[name] = value
        response = self.put_raw(scope, document)
        if response.status_code != 201:
            raise StoreRefused(response)
        body = response.json()
        return body["meta"], body["swept"]

    def _absent_or_raise(self, response: Any) -> None:
        refused = StoreRefused(response)
        if refused.status == 404 and refused.code == "ERR_ARTIFACT_NOT_FOUND":
            return None
        raise refused

    def head(self, scope: Any, ref: str) -> dict[str, Any] | None:
        response = self.head_raw(scope, ref)
        if response.status_code == 200:
            body = response.json()
            assert set(body) == {"meta"}, body  # head never carries the payload
            return body["meta"]
        return self._absent_or_raise(response)

    def get(self, scope: Any, ref: str) -> Record | None:
        response = self.get_raw(scope, ref)
        if response.status_code == 200:
            body = response.json()
            return Record(meta=body["meta"], data=decode_payload(body["payload"]), payload=body["payload"])
        return self._absent_or_raise(response)

    def delete(self, scope: Any, ref: str) -> None:
        response = self.delete_raw(scope, ref)
        if response.status_code != 204:
            raise StoreRefused(response)

    def list(self, scope: Any, limit: Any = None, cursor: Any = None) -> dict[str, Any]:
        response = self.list_raw(scope, limit, cursor)
        if response.status_code != 200:
            raise StoreRefused(response)
        return response.json()

    def list_all(self, scope: Any, limit: int | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = None
        for _ in range(1000):
            page = self.list(scope, limit=limit, cursor=cursor)
            rows.extend(page["artifacts"])
            cursor = page.get("cursor")
            if cursor is None:
                return rows
        raise AssertionError("list never ended")

    def capabilities(self) -> dict[str, Any]:
        response = self.http.get(CAPABILITIES)
        assert response.status_code == 200, response.content
        return response.json()

    def resolve(self, scope: Any, tool_name: str, wants: Any, args: Any, input_schema: Any = None) -> dict[str, Any]:
        response = self.resolve_raw(scope, tool_name, wants, args, input_schema)
        if response.status_code != 200:
            raise StoreRefused(response)
        return response.json()


class Harness:
    """The TS harness's hooks, served by the server's test-only endpoints."""

    name = "footprint-ledger over HTTP"

    def __init__(self) -> None:
        self.http = Client(raise_request_exception=False)

    def _new(self, document: dict[str, Any]) -> StoreClient:
        response = self.http.post(f"{TESTING}/stores", json.dumps(document), content_type="application/json")
        assert response.status_code == 201, response.content
        body = response.json()
        return StoreClient(body["key"], body["project"])

    def create_store(self) -> StoreClient:
        """A fresh, empty store (a new project with its own key)."""
        return self._new({})

    def bounded(self, max_bytes_per_scope: int) -> StoreClient:
        return self._new({"maxBytesPerScope": max_bytes_per_scope})

    def advance(self, store: StoreClient, ms: int) -> int:
        response = store.post(f"{TESTING}/clock", None, {"advanceMs": ms})
        assert response.status_code == 200, response.content
        return int(response.json()["now"])

    def corrupt(self, store: StoreClient, scope: dict[str, Any], ref: str) -> None:
        response = store.post(f"{TESTING}/corrupt", None, {"scope": scope, "ref": ref})
        assert response.status_code == 204, response.content


_tokens = itertools.count()


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


class Kit:
    """What each conformance case receives: a unique token, fresh scopes, and the store's clock."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.token = f"cnf-{_base36(int(time.time() * 1000))}-{_base36(next(_tokens))}"
        self._scopes = itertools.count()

    def scope(self, suffix: str) -> dict[str, str]:
        return {"conversationId": f"{self.token}-{_base36(next(self._scopes))}-{suffix}"}

    def now(self, store: StoreClient) -> int:
        """The store's own clock: put a clock probe, delete it, and read its createdAt."""
        probe_scope = {"conversationId": f"{self.token}-clock-probe"}
        meta, _ = store.put(probe_scope, kind="conformance/clock-probe", media_type="text/plain", data=".")
        store.delete(probe_scope, meta["ref"])
        return int(meta["createdAt"])

    def advance(self, store: StoreClient, ms: int) -> int:
        return self.harness.advance(store, ms)

    def corrupt(self, store: StoreClient, scope: dict[str, Any], ref: str) -> None:
        self.harness.corrupt(store, scope, ref)

    def bounded(self, max_bytes_per_scope: int) -> StoreClient:
        return self.harness.bounded(max_bytes_per_scope)


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def kit(harness: Harness) -> Kit:
    return Kit(harness)


# --- direct ORM writes ------------------------------------------------------------------------------


def as_scope(scope: dict[str, Any] | Scope) -> Scope:
    return scope if isinstance(scope, Scope) else scope_from_json(scope)


def _artifact_row(
    store: ArtifactStore,
    scope: Scope,
    *,
    kind: str,
    body: bytes,
    created_at: int,
    ref: str | None = None,
    media_type: str = "text/plain",
    shape: str = "text",
    label: str | None = None,
    digest: str | bool | None = None,
    expires_at: int | None = None,
    origin: dict[str, Any] | None = None,
    parent_refs: list[str] | None = None,
    bucket: Any = None,
) -> Artifact:
    return Artifact(
        store=store,
        scope_ns=scope.namespace,
        ref=ref or mint_ref(),
        scope_tenant=scope.tenant,
        scope_principal=scope.principal,
        scope_conversation=scope.conversation,
        kind=kind,
        media_type=media_type,
        bytes=len(body),
        label=label,
        digest=sha256_digest(body) if digest is True else digest or None,
        created_at=created_at,
        expires_at=expires_at,
        expiry_bucket=bucket if bucket is not None else partitions.bucket_for(expires_at),
        origin=origin,
        origin_run_id=origin.get("runId") if origin else None,
        parent_refs=parent_refs or None,
        payload_shape=shape,
    )


def orm_put(store: ArtifactStore, scope: dict[str, Any] | Scope, *, body: bytes, **fields: Any) -> Artifact:
    """Write one artifact (metadata + payload row) exactly as `services.artifact_put` lays it out."""
    artifact = _artifact_row(store, as_scope(scope), body=body, **fields)
    artifact.save(force_insert=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO artifacts_payload (expiry_bucket, artifact_id, body) VALUES (%s, %s, %s)",
            [artifact.expiry_bucket, artifact.pk, body],
        )
    return artifact


def orm_put_many(store: ArtifactStore, scope: dict[str, Any] | Scope, rows: list[dict[str, Any]]) -> list[Artifact]:
    """Bulk `orm_put`: each row is the keyword arguments of one artifact (with `body`)."""
    target = as_scope(scope)
    artifacts = Artifact.objects.bulk_create([_artifact_row(store, target, **row) for row in rows])
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO artifacts_payload (expiry_bucket, artifact_id, body) VALUES (%s, %s, %s)",
            [(a.expiry_bucket, a.pk, row["body"]) for a, row in zip(artifacts, rows, strict=True)],
        )
    return artifacts
