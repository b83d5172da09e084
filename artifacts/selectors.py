"""Reads of the artifact store. Every read is scoped to (store, scope) and filters expiry by the
store's clock before touching a payload, so an expired artifact is invisible however late the
sweeper runs."""

import base64
import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection
from django.db.models import Q, QuerySet

from artifacts.clock import LIVE_ROWS, store_now_ms
from artifacts.exceptions import ArtifactIntegrity, ArtifactNotFound
from artifacts.models import Artifact, ArtifactStore
from artifacts.refs import is_ref
from artifacts.rows import RowShape
from artifacts.scopes import Scope
from footprint_site.lib.db import prepared_cursor
from footprint_site.pagination import Page, keyset_page
from tenancy.models import Project

DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 200
META_FIELDS = (
    "id",
    "ref",
    "kind",
    "media_type",
    "bytes",
    "created_at",
    "label",
    "digest",
    "expires_at",
    "origin",
    "parent_refs",
    "payload_shape",
    "expiry_bucket",
)


def not_found(ref: str) -> ArtifactNotFound:
    """One answer, byte-identical but for the ref, for missing, expired, foreign and malformed refs."""
    shown = ref if len(ref) <= 64 else ref[:61] + "…"
    return ArtifactNotFound(
        f"artifact '{shown}' does not resolve in this scope — missing, expired, swept, or never stored "
        "under this scope."
    )


def _live(store: ArtifactStore, scope: Scope) -> QuerySet[Artifact]:
    now = store_now_ms(store)
    return Artifact.objects.filter(store=store, scope_ns=scope.namespace, deleted_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )


# Head, get and wants resolution are the agents' hot path: one row by its unique key, as a fixed
# statement, because building it through the ORM cost about 1.5 ms of CPU per request, several
# times the query itself. LIVE_ROWS is the predicate _live() states, in SQL.
META_ROW = RowShape(Artifact, META_FIELDS)
LIVE_BY_REF = (
    " FROM artifacts_artifact WHERE store_id = %(store)s AND scope_ns = %(ns)s AND ref = %(ref)s AND " + LIVE_ROWS
)
HEAD_SQL = "SELECT " + META_ROW.columns + LIVE_BY_REF
# The payload rides along with the meta in one query; the correlated subquery reads a single
# partition (its expiry_bucket is the outer row's).
PAYLOAD_OF_ROW = (
    "SELECT p.body FROM artifacts_payload p"
    " WHERE p.expiry_bucket = artifacts_artifact.expiry_bucket AND p.artifact_id = artifacts_artifact.id"
)
GET_SQL = "SELECT " + META_ROW.columns + ", (" + PAYLOAD_OF_ROW + ")" + LIVE_BY_REF


def _live_row(sql: str, store: ArtifactStore, scope: Scope, ref: str) -> tuple[Any, ...] | None:
    if not is_ref(ref):
        return None
    with prepared_cursor() as cursor:
        cursor.execute(sql, {"store": store.pk, "ns": scope.namespace, "ref": ref, "now": store_now_ms(store)})
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


def artifact_head(*, store: ArtifactStore, scope: Scope, ref: str) -> Artifact:
    """The live artifact of (store, scope) with this ref, metadata fields only."""
    row = _live_row(HEAD_SQL, store, scope, ref)
    if row is None:
        raise not_found(ref)
    return META_ROW.instance(row)


def artifact_get(*, store: ArtifactStore, scope: Scope, ref: str) -> tuple[Artifact, bytes]:
    """The artifact and its canonical bytes, re-hashed against the minted digest when it has one."""
    row = _live_row(GET_SQL, store, scope, ref)
    if row is None:
        raise not_found(ref)
    artifact = META_ROW.instance(row)
    payload = row[-1]
    if payload is None:  # a live meta without its bytes is a store fault, not an absence
        raise ArtifactIntegrity(f"[artifacts] get('{ref}') refused: the stored payload is missing.", ref=ref)
    body = bytes(payload)
    if artifact.digest is not None:
        actual = "sha-256:" + hashlib.sha256(body).hexdigest()
        if actual != artifact.digest:
            raise ArtifactIntegrity(
                f"[artifacts] get('{ref}') refused: the stored payload no longer matches its minted digest "
                f"(expected {artifact.digest}, computed {actual}). The bytes changed after put — a corrupted "
                "file, an external edit, or a store bug — and returning them as if whole would be silent "
                "corruption. Re-create the artifact from its source; the meta (head) is still readable.",
                ref=ref,
                expected=artifact.digest,
                actual=actual,
            )
    return artifact, body


def _decode_list_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor or not cursor.startswith("k1."):
        return None
    try:
        created_at, ref = orjson.loads(base64.urlsafe_b64decode(cursor[3:] + "=" * (-len(cursor[3:]) % 4)))
    except (ValueError, TypeError):
        return None
    # bool is an int subclass: a forged [true, ref] would otherwise read as position 1, an empty walk.
    if isinstance(created_at, bool) or not isinstance(created_at, int) or not is_ref(ref):
        return None
    return created_at, ref


def _encode_list_cursor(key: tuple[int, str]) -> str:
    return "k1." + base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def artifact_list(
    *, store: ArtifactStore, scope: Scope, limit: float | None = None, cursor: str | None = None
) -> tuple[list[Artifact], str | None]:
    """Live artifacts of the scope, newest first (ties by ref), keyset-paged; metadata only.

    `limit` is rounded down, as the framework's stores do. An undecodable cursor restarts from the
    newest. The cursor is present only when more rows exist.
    """
    limit = max(1, min(DEFAULT_LIST_LIMIT if limit is None else int(limit), MAX_LIST_LIMIT))
    # The framework's cursor format (a composite key, "k1." + JSON), not the one-integer cursor.
    page = keyset_page(
        _live(store, scope).only(*META_FIELDS),
        order=("-created_at", "ref"),
        after=_decode_list_cursor(cursor),
        limit=limit,
    )
    return page.items, _encode_list_cursor(page.next_after) if page.has_more else None


# --- pages (project-wide: auditors see every scope of their project) ---------------------------

PAGE_STATES = ("live", "expired", "held", "all")


def artifact_list_for_project(
    *,
    store: ArtifactStore,
    kind: str | None = None,
    conversation: str | None = None,
    run_id: str | None = None,
    state: str = "live",
    cursor: str | None = None,
    limit: int = 50,
) -> Page[Artifact]:
    """A page of artifacts of one project's store, newest first by id."""
    now = store_now_ms(store)
    rows = Artifact.objects.filter(store=store).only(*META_FIELDS, "scope_conversation", "held", "origin_run_id")
    if kind:
        rows = rows.filter(kind=kind)
    if conversation:
        rows = rows.filter(scope_conversation=conversation)
    if run_id:
        rows = rows.filter(origin_run_id=run_id)
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    if state == "live":
        rows = rows.filter(live, deleted_at__isnull=True)
    elif state == "expired":
        rows = rows.exclude(live)
    elif state == "held":
        rows = rows.filter(held=True)
    return keyset_page(rows, order="-id", cursor=cursor, limit=limit)


@dataclass
class ArtifactView:
    """What the detail page shows of one ref, whatever became of it."""

    artifact: Artifact | None
    tombstone: Any
    is_live: bool
    body: bytes | None
    digest_status: str  # "verified", "mismatch", "not-minted", "not-read"
    children: list[Artifact]


def artifact_view_for_project(*, store: ArtifactStore, ref: str) -> ArtifactView | None:
    """The artifact (any state) with its payload when it may be shown: live, or held as evidence."""
    from artifacts.models import Tombstone

    artifact = Artifact.objects.filter(store=store, ref=ref).first() if is_ref(ref) else None
    tombstone = Tombstone.objects.filter(store=store, ref=ref).order_by("-swept_at").first() if is_ref(ref) else None
    if artifact is None and tombstone is None:
        return None
    if artifact is None:
        return ArtifactView(None, tombstone, False, None, "not-read", [])
    is_live, body, status = _shown_payload(store, artifact)
    children = list(Artifact.objects.filter(store=store, parent_refs__contains=[ref]).order_by("-id")[:50])
    return ArtifactView(artifact, tombstone, is_live, body, status, children)


def _shown_payload(store: ArtifactStore, artifact: Artifact) -> tuple[bool, bytes | None, str]:
    """Whether the artifact is live, its payload when it may be shown (live, or held as evidence),
    and whether those bytes still match the minted digest."""
    now = store_now_ms(store)
    is_live = artifact.deleted_at is None and (artifact.expires_at is None or artifact.expires_at > now)
    if not (is_live or artifact.held):
        return is_live, None, "not-read"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT body FROM artifacts_payload WHERE expiry_bucket = %s AND artifact_id = %s",
            [artifact.expiry_bucket, artifact.pk],
        )
        row = cursor.fetchone()
    body = bytes(row[0]) if row else None
    if body is None:
        return is_live, None, "not-read"
    if not artifact.digest:
        return is_live, body, "not-minted"
    return is_live, body, "verified" if "sha-256:" + hashlib.sha256(body).hexdigest() == artifact.digest else "mismatch"


def artifacts_referenced(*, project: Project, refs: list[str]) -> list[Artifact]:
    """The project's artifacts among `refs` (any state), once each, in their order."""
    found = {a.ref: a for a in Artifact.objects.filter(store__project=project, ref__in=refs).select_related("store")}
    return [found[ref] for ref in dict.fromkeys(refs) if ref in found]


def artifact_shown(artifact: Artifact) -> ArtifactView:
    """The artifact with its payload as the detail page shows it (no tombstone, no children)."""
    return ArtifactView(artifact, None, *_shown_payload(artifact.store, artifact), [])


PAGE_PREVIEW_BYTES = 64 * 1024


def payload_preview(view: ArtifactView, limit: int = PAGE_PREVIEW_BYTES) -> dict[str, Any] | None:
    """Text to show of the view's payload (its first `limit` bytes), always rendered escaped by the
    template; binary is never decoded.

    Bytes that no longer match their digest are never shown, as get never delivers them. JSON is
    indented when orjson can round-trip it and shown as stored otherwise: bytes without a digest
    can be corrupt too, orjson cannot parse a lone surrogate (valid JSON text) and cannot write
    nesting deeper than 254 levels.
    """
    body, artifact = view.body, view.artifact
    if body is None or artifact is None or artifact.payload_shape == "binary" or view.digest_status == "mismatch":
        return None
    text = body[:limit].decode("utf-8", errors="replace")
    if artifact.payload_shape == "json" and len(body) <= limit:
        with contextlib.suppress(orjson.JSONDecodeError, orjson.JSONEncodeError):  # else the stored text
            text = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    return {"text": text, "truncated": len(body) > limit, "limit": limit}
