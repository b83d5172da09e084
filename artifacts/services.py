"""Writes of the artifact store: put, delete, holds, sweeps, and the test hooks."""

import hashlib
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from artifacts import partitions
from artifacts.clock import LIVE_ROWS, store_now_ms
from artifacts.exceptions import ArtifactNotFound, InvalidArtifact, UnknownParentRef
from artifacts.models import Artifact, ArtifactHold, ArtifactStore, SweepRun, Tombstone
from artifacts.payloads import canonical_bytes
from artifacts.refs import is_ref, mint_ref
from artifacts.rows import RowShape
from artifacts.scopes import Scope
from footprint_site.lib.db import partition_detach_and_drop, prepared_cursor, session_connection
from footprint_site.lib.ids import RUN_ID_RULE, is_run_id
from footprint_site.lib.js import js_stringify, js_trim
from footprint_site.lib.jsonbody import json_holds_nul
from tenancy.models import AdminChange, Project
from tenancy.services import Actor, admin_change_record

MAX_TTL_FACTS_PER_PUT = 1000
PARTITION_LOCK = 7_730_001  # session advisory lock key of the partition-dropping phase


STORE_ROW = RowShape(ArtifactStore, [f.attname for f in ArtifactStore._meta.concrete_fields])
STORE_OF_PROJECT = (  # column names from the model; the project is a parameter
    "SELECT " + STORE_ROW.columns + " FROM artifacts_artifactstore WHERE project_id = %s"  # noqa: S608
)


def store_for_project(*, project: Project) -> ArtifactStore:
    """The project's store, created by its first request; writes the store row only then.

    Read afresh on every call and never cached: admins edit the retention dials, and a stale
    one would be a silently wrong answer. The row nearly always exists, so the read is one fixed
    SELECT (the ORM's get_or_create cost several times the query to build it on every request).
    """
    with prepared_cursor() as cursor:
        cursor.execute(STORE_OF_PROJECT, [project.pk])
        row = cursor.fetchone()
    if row is not None:
        return STORE_ROW.instance(row)
    store, _ = ArtifactStore.objects.get_or_create(project=project)
    return store


@dataclass
class PutInput:
    kind: Any
    media_type: Any
    payload: Any
    label: Any = None
    digest: Any = None
    expires_at: Any = None
    origin: Any = None
    parent_refs: Any = None
    present: set[str] = field(default_factory=set)


@dataclass
class Swept:
    ref: str
    reason: str
    kind: str
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "reason": self.reason, "kind": self.kind, "bytes": self.bytes}


def _check_put(spec: PutInput, now: int) -> int | None:
    """Spec §1.2 steps 1-4, in order; returns the caller's expiresAt in whole milliseconds, if sent.

    Messages may quote kind or mediaType, never payload or scope.
    """
    if not isinstance(spec.kind, str) or not js_trim(spec.kind):
        shown = "undefined" if "kind" not in spec.present else js_stringify(spec.kind)
        raise InvalidArtifact(
            f"kind is {shown}. kind is the consumer vocabulary a redeemer decides from ('dataset/rows', "
            "'chart/spec') — a blank one makes every head() useless. Name what this artifact IS."
        )
    if not isinstance(spec.media_type, str) or not js_trim(spec.media_type):
        shown = "undefined" if "mediaType" not in spec.present else js_stringify(spec.media_type)
        raise InvalidArtifact(
            f"mediaType is {shown}. mediaType is the payload's MIME type ('application/json', 'text/csv') "
            "— a redeemer renders by it. Name what the bytes ARE."
        )
    # PostgreSQL text cannot hold U+0000; refuse it by field name, never quoting the value.
    for name, value in (("kind", spec.kind), ("mediaType", spec.media_type), ("label", spec.label)):
        if isinstance(value, str) and "\x00" in value:
            raise InvalidArtifact(f"{name} contains the character U+0000, which this store cannot keep.")
    if spec.origin is not None and json_holds_nul(orjson.dumps(spec.origin)):
        raise InvalidArtifact("origin contains the character U+0000, which this store cannot keep.")
    requested_expiry = None
    if "expiresAt" in spec.present:
        value = spec.expires_at
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidArtifact("expiresAt must be a finite number (unix milliseconds).")
        # Whole milliseconds (§10.4), rounded down since a store may only make expiry earlier. The
        # born-expired rule judges the rounded value: now + 0.5 would otherwise pass, then mint at now.
        requested_expiry = math.floor(value)
        if requested_expiry <= now:
            rounded = "" if requested_expiry == value else f" (rounded down to whole milliseconds: {requested_expiry})"
            raise InvalidArtifact(
                f"expiresAt {value}{rounded} is not after the store's current time {now}: the artifact would be "
                "born expired. State a later time, or omit expiresAt."
            )
    if "digest" in spec.present and spec.digest != "sha-256":
        raise InvalidArtifact("digest must be 'sha-256', the only algorithm this store computes.")
    if spec.label is not None and not isinstance(spec.label, str):
        raise InvalidArtifact("label must be a string when present.")
    if spec.origin is not None and not isinstance(spec.origin, dict):
        raise InvalidArtifact("origin must be an object {runId?, toolCallId?} when present.")
    # The pages link origin.runId to its run, whose URL cannot hold every string: ingestion's rule.
    if isinstance(spec.origin, dict) and "runId" in spec.origin and not is_run_id(spec.origin["runId"]):
        raise InvalidArtifact("origin." + RUN_ID_RULE.removeprefix("meta."))
    if spec.parent_refs is not None and (
        not isinstance(spec.parent_refs, list) or not all(isinstance(r, str) for r in spec.parent_refs)
    ):
        raise InvalidArtifact("parentRefs must be an array of art_… refs when present.")
    return requested_expiry


LAST_EXPIRY_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last day a partition can name


def _stated_expiry(store: ArtifactStore, requested: int | None, now: int) -> int | None:
    """Spec §1.2 step 8: the earliest of the caller's expiry and the store's ceilings.

    The store may tighten a caller's expiry, never extend it, so a far-future expiresAt is judged
    only after tightening: with a ceiling it simply becomes now + ceiling. A ceiling reaching past
    the last day a partition can name stops at that day, which is tightening too.
    """
    stated = requested
    for ceiling in (store.ttl_ms, store.max_ttl_ms):
        if ceiling is not None:
            cap = min(now + ceiling, LAST_EXPIRY_MS)
            stated = cap if stated is None else min(stated, cap)
    if stated is not None and stated > LAST_EXPIRY_MS:
        raise InvalidArtifact(
            f"expiresAt is after 9999-12-31T23:59:59.999Z ({LAST_EXPIRY_MS}), the latest expiry this store "
            "can keep, and this store has no time-to-live to tighten it to. State an earlier time, or omit "
            "expiresAt for an artifact that does not expire."
        )
    return stated


def _unresolved_parents(cursor: Any, store: ArtifactStore, scope: Scope, parents: list[str], now: int) -> list[str]:
    candidates = [p for p in parents if is_ref(p)]
    live: set[str] = set()
    if candidates:
        cursor.execute(
            "SELECT ref FROM artifacts_artifact WHERE store_id = %(store)s AND scope_ns = %(ns)s "  # noqa: S608
            "AND ref = ANY(%(refs)s) AND " + LIVE_ROWS,
            {"store": store.pk, "ns": scope.namespace, "refs": candidates, "now": now},
        )
        live = {row[0] for row in cursor.fetchall()}
    return [p for p in parents if p not in live]


def _remove(cursor: Any, store: ArtifactStore, reasons: dict[int, str], scope_ns: str) -> list[Swept]:
    """Delete these artifacts' metadata and payload rows, leaving a tombstone for each; held ones stay.

    `reasons` maps artifact ids to their reasons, in sweep order; returns what was removed, in
    that order. A put reads the rows it sweeps without row locks, so the DELETE judges `held`
    itself: it waits out a hold being placed, then sees it. Payloads are addressed by the bucket
    each row has when deleted, never by an earlier read, since a hold moves its payload to the far
    partition (and a release leaves it there).
    """
    if not reasons:
        return []
    cursor.execute(
        "DELETE FROM artifacts_artifact WHERE id = ANY(%s) AND NOT held"
        " RETURNING id, ref, kind, bytes, digest, expires_at, expiry_bucket",
        [list(reasons)],
    )
    deleted = {row[0]: row for row in cursor.fetchall()}
    rows = [deleted[artifact_id] for artifact_id in reasons if artifact_id in deleted]
    if not rows:
        return []
    cursor.execute(
        "DELETE FROM artifacts_payload p USING unnest(%s::date[], %s::int8[]) AS d(b, i) "
        "WHERE p.expiry_bucket = d.b AND p.artifact_id = d.i",
        [[r[6] for r in rows], [r[0] for r in rows]],
    )
    cursor.execute(
        "INSERT INTO artifacts_tombstone (store_id, scope_ns, ref, kind, bytes, digest, reason, expired_at, swept_at)"
        " SELECT %s, %s, r, k, b, d, reason, e, now()"
        " FROM unnest(%s::text[], %s::text[], %s::int8[], %s::text[], %s::text[], %s::int8[])"
        " AS t(r, k, b, d, reason, e)",
        [
            store.pk,
            scope_ns,
            [r[1] for r in rows],
            [r[2] for r in rows],
            [r[3] for r in rows],
            [r[4] for r in rows],
            [reasons[r[0]] for r in rows],
            [r[5] for r in rows],
        ],
    )
    return [Swept(r[1], reasons[r[0]], r[2], r[3]) for r in rows]


def _plan_retention(store: ArtifactStore, live: list[tuple[Any, ...]], incoming: int) -> dict[int, str]:
    """The retention plan of spec §4.4 over live (id, bytes, held) rows, oldest first.

    Held rows are never evicted. Returns {artifact id: reason} in eviction order.
    """
    if store.max_bytes_per_scope is not None and incoming > store.max_bytes_per_scope:
        raise InvalidArtifact(
            f"the payload is {incoming} bytes and this store's byte budget per scope is "
            f"{store.max_bytes_per_scope}. Evicting everything else would not make it fit, so it is "
            "refused instead of admitted by force. Store something smaller, or build the store with a "
            "larger maxBytesPerScope."
        )
    reasons: dict[int, str] = {}
    remaining = list(live)
    evictable = [row for row in remaining if not row[2]]

    def evict(reason: str) -> bool:
        if not evictable:
            return False
        row = evictable.pop(0)
        remaining.remove(row)
        reasons[row[0]] = reason
        return True

    if store.max_count_per_scope is not None:
        while len(remaining) + 1 > store.max_count_per_scope:
            if not evict(Tombstone.Reason.MAX_COUNT):
                raise InvalidArtifact("this scope's count budget is taken by held artifacts, which are never evicted.")
    if store.max_bytes_per_scope is not None:
        while sum(row[1] for row in remaining) + incoming > store.max_bytes_per_scope:
            if not evict(Tombstone.Reason.MAX_BYTES):
                raise InvalidArtifact("this scope's byte budget is taken by held artifacts, which are never evicted.")
    return reasons


def _make_room(cursor: Any, store: ArtifactStore, scope_ns: str, now: int, incoming: int) -> list[Swept]:
    """Spec §12.5 steps 4-5: sweep the scope's expired rows, then evict what its budgets require.

    A row an agent deleted while it was held is no expiry of a live artifact: the sweeper removes
    it as deleted, and the put does not report it in `swept`.

    Returns the swept artifacts in sweep order. A plan that cannot fit the payload raises
    InvalidArtifact, and the caller's transaction undoes the sweep too: a refusal evicts nothing.
    """
    cursor.execute(
        "SELECT id FROM artifacts_artifact WHERE store_id = %(store)s AND scope_ns = %(ns)s "
        "AND expires_at <= %(now)s AND NOT held AND deleted_at IS NULL ORDER BY expires_at, ref LIMIT %(limit)s",
        {"store": store.pk, "ns": scope_ns, "now": now, "limit": MAX_TTL_FACTS_PER_PUT},
    )
    swept = _remove(cursor, store, {row[0]: Tombstone.Reason.TTL.value for row in cursor.fetchall()}, scope_ns)
    if store.max_bytes_per_scope is None and store.max_count_per_scope is None:
        return swept
    while True:
        cursor.execute(
            "SELECT id, bytes, held FROM artifacts_artifact WHERE store_id = %(store)s AND scope_ns = %(ns)s "  # noqa: S608
            f"AND {LIVE_ROWS} ORDER BY created_at, ref",
            {"store": store.pk, "ns": scope_ns, "now": now},
        )
        planned = _plan_retention(store, cursor.fetchall(), incoming)
        evicted = _remove(cursor, store, planned, scope_ns)
        swept += evicted
        if len(evicted) == len(planned):
            return swept
        # An auditor held (or an agent deleted) a planned row after it was read: plan again over
        # what the scope holds now. Other puts cannot interleave; they wait on the advisory lock.


@transaction.atomic
def artifact_put(*, store: ArtifactStore, scope: Scope, spec: PutInput) -> tuple[dict[str, Any], list[Swept]]:
    """Mint an artifact (spec §1.2) in one transaction under the scope's advisory lock.

    Refusals (InvalidArtifact, UnknownParentRef) write nothing and evict nothing. Writes the
    metadata and payload rows, deletes what the TTL and the budgets sweep (each with a
    tombstone), and returns the meta and the swept list in eviction order.
    """
    now = store_now_ms(store)
    requested_expiry = _check_put(spec, now)
    namespace = scope.namespace
    with connection.cursor() as cursor:
        # Parent checks, retention and the insert are one atomic step per scope.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"{store.pk}:{namespace}"])
        parents = spec.parent_refs or []
        if parents:
            unresolved = _unresolved_parents(cursor, store, scope, parents, now)
            if unresolved:
                named = ", ".join(f"'{r}'" if is_ref(r) else "'(not a ref)'" for r in unresolved)
                raise UnknownParentRef(
                    f"[artifacts] put refused: parentRefs {named} do not resolve in this scope. parentRefs are "
                    "derivation FACTS validated at mint — a parent must exist (and not be expired) in the same "
                    "scope when the child is born. Store the parent first, or drop it from parentRefs; head(ref) "
                    "tells you what resolves.",
                    unresolved=unresolved,
                )
        # Step 6 follows step 5 (U11: the first failing rule names the refusal), still before a
        # ref is minted, so a put with a dangling parent hears about the parent whatever its payload.
        shape, body = canonical_bytes(spec.payload)
        expires_at = _stated_expiry(store, requested_expiry, now)
        swept = _make_room(cursor, store, namespace, now, len(body))

        digest = "sha-256:" + hashlib.sha256(body).hexdigest() if "digest" in spec.present else None
        bucket = partitions.bucket_for(expires_at)
        origin = spec.origin if isinstance(spec.origin, dict) else None
        artifact = Artifact.objects.create(
            store=store,
            scope_ns=namespace,
            ref=mint_ref(),
            scope_tenant=scope.tenant,
            scope_principal=scope.principal,
            scope_conversation=scope.conversation,
            kind=spec.kind,
            media_type=spec.media_type,
            bytes=len(body),
            label=spec.label,
            digest=digest,
            created_at=now,
            expires_at=expires_at,
            expiry_bucket=bucket,
            origin=origin,
            origin_run_id=origin.get("runId") if origin and isinstance(origin.get("runId"), str) else None,
            parent_refs=parents or None,
            payload_shape=shape,
        )
        cursor.execute(
            "INSERT INTO artifacts_payload (expiry_bucket, artifact_id, body) VALUES (%s, %s, %s)",
            [bucket, artifact.pk, body],
        )
    return artifact.meta(), swept


@transaction.atomic
def artifact_delete(*, store: ArtifactStore, scope: Scope, ref: str) -> None:
    """Delete a ref in this scope; absent, foreign or malformed refs are a quiet no-op.

    A held artifact is hidden from agents instead (deleted_at) and kept until its hold ends.
    """
    if not is_ref(ref):
        return
    row = (
        Artifact.objects.select_for_update()
        .filter(store=store, scope_ns=scope.namespace, ref=ref, deleted_at__isnull=True)
        .values_list("id", "held")
        .first()
    )
    if row is None:
        return
    artifact_id, held = row
    if held:
        Artifact.objects.filter(pk=artifact_id).update(deleted_at=store_now_ms(store))
        return
    with connection.cursor() as cursor:
        _remove(cursor, store, {artifact_id: Tombstone.Reason.DELETED}, scope.namespace)


def _move_payload(artifact: Artifact, bucket: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE artifacts_payload SET expiry_bucket = %s WHERE expiry_bucket = %s AND artifact_id = %s",
            [bucket, artifact.expiry_bucket, artifact.pk],
        )
    Artifact.objects.filter(pk=artifact.pk).update(expiry_bucket=bucket)


@transaction.atomic
def artifact_hold_place(*, store: ArtifactStore, ref: str, user: User, reason: str) -> ArtifactHold:
    """Hold every copy of `ref` in the store: never swept, evicted or deleted until released.

    The payload moves to the far partition, which partition drops never touch. Writes the
    ArtifactHold row and a HOLD_PLACED AdminChange naming `user`; raises ArtifactNotFound for a
    ref the store does not hold, writing nothing.
    """
    artifacts = list(Artifact.objects.select_for_update().filter(store=store, ref=ref)) if is_ref(ref) else []
    if not artifacts:
        raise ArtifactNotFound(f"No artifact {ref!r} in this project to hold.")
    for artifact in artifacts:
        if artifact.expiry_bucket != partitions.FAR_BUCKET:
            _move_payload(artifact, partitions.FAR_BUCKET)
    Artifact.objects.filter(pk__in=[a.pk for a in artifacts]).update(held=True)
    hold = ArtifactHold.objects.create(store=store, artifact_ref=ref, reason=reason, placed_by=user)
    admin_change_record(
        actor=Actor.of_user(user),
        action=AdminChange.Action.HOLD_PLACED,
        project=Project(pk=store.project_id),
        target_type="artifact hold",
        target_id=hold.pk,
        target_label=f"hold on {ref}",
        before=None,
        after={"reason": reason},
    )
    return hold


@transaction.atomic
def artifact_hold_release(*, hold: ArtifactHold, user: User) -> ArtifactHold:
    """End a hold (kept, never deleted); the artifact sweeps normally once no hold remains.

    Sets the hold's release and writes a HOLD_RELEASED AdminChange naming `user`. The release is
    claimed with a conditional UPDATE: releasing a released hold writes nothing.
    """
    claimed = ArtifactHold.objects.filter(pk=hold.pk, released_at__isnull=True).update(
        released_at=timezone.now(), released_by=user
    )
    if (
        claimed
        and not ArtifactHold.objects.filter(
            store=hold.store, artifact_ref=hold.artifact_ref, released_at__isnull=True
        ).exists()
    ):
        Artifact.objects.filter(store=hold.store, ref=hold.artifact_ref).update(held=False)
    hold.refresh_from_db()
    if claimed:
        admin_change_record(
            actor=Actor.of_user(user),
            action=AdminChange.Action.HOLD_RELEASED,
            project=Project(pk=hold.store.project_id),
            target_type="artifact hold",
            target_id=hold.pk,
            target_label=f"hold on {hold.artifact_ref}",
            before={"reason": hold.reason},
            after=None,
        )
    return hold


def artifacts_sweep(*, batch_size: int = 5000, time_budget_s: float = 50.0, grace_ms: int = 3_600_000) -> SweepRun:
    """Remove what has expired: create partitions ahead, drop expired payload partitions whole,
    then delete expired metadata (and far-partition payloads) in batches with tombstones.

    Safe to run twice or concurrently: batches claim rows with FOR UPDATE SKIP LOCKED and the
    partition DDL uses IF EXISTS / IF NOT EXISTS. Never blocks ingestion or reads: each batch is
    its own short transaction and partitions are detached CONCURRENTLY.
    """
    started = timezone.now()
    clock = time.monotonic()
    real_now = int(time.time() * 1000)
    rows = payload_bytes = dropped = 0
    with connection.cursor() as cursor:
        existing = partitions.existing_partitions()
        for statement in partitions.ensure_partitions_sql(existing=existing):
            cursor.execute(statement)
        # One sweeper at a time drops partitions; a second one skips straight to the metadata.
        with session_connection().cursor() as lock:
            lock.execute("SELECT pg_try_advisory_lock(%s)", [PARTITION_LOCK])
            if lock.fetchone()[0]:
                try:
                    for day in sorted(existing):
                        if _day_end_ms(day) + grace_ms > real_now:
                            continue
                        payload_bytes += _drop_partition(cursor, partitions.partition_name(day))
                        dropped += 1
                finally:
                    lock.execute("SELECT pg_advisory_unlock(%s)", [PARTITION_LOCK])
        # Each claim must match a partial index, or every batch would scan the whole table.
        horizon = real_now + (ArtifactStore.objects.aggregate(m=Max("clock_offset_ms"))["m"] or 0)
        claims = (
            ("a.deleted_at IS NOT NULL AND NOT a.held", "a.deleted_at"),
            (
                "a.expires_at IS NOT NULL AND NOT a.held AND a.expires_at <= %(horizon)s"
                " AND a.expires_at <= %(now)s + s.clock_offset_ms",
                "a.expires_at",
            ),
        )
        for condition, order in claims:
            while time.monotonic() - clock < time_budget_s:
                swept, far_bytes = _sweep_batch(cursor, condition, order, real_now, horizon, batch_size)
                rows += swept
                payload_bytes += far_bytes
                if swept < batch_size:
                    break
    finished = timezone.now()
    return SweepRun.objects.create(
        started_at=started,
        finished_at=finished,
        metadata_rows=rows,
        payload_bytes=payload_bytes,
        partitions_dropped=dropped,
        duration_ms=int((time.monotonic() - clock) * 1000),
    )


def _sweep_batch(cursor: Any, condition: str, order: str, now: int, horizon: int, batch: int) -> tuple[int, int]:
    """Claim, delete and tombstone one batch in its own short transaction; returns (rows, far bytes)."""
    with transaction.atomic():
        cursor.execute(
            f"""
            WITH d AS (
                SELECT a.id FROM artifacts_artifact a JOIN artifacts_artifactstore s ON s.id = a.store_id
                WHERE {condition}
                ORDER BY {order} LIMIT %(batch)s FOR UPDATE OF a SKIP LOCKED
            ), gone AS (
                DELETE FROM artifacts_artifact a USING d WHERE a.id = d.id
                RETURNING a.id, a.store_id, a.scope_ns, a.ref, a.kind, a.bytes, a.digest, a.expires_at,
                          a.expiry_bucket, a.deleted_at
            ), far AS (
                -- Payloads in daily partitions go when their partition is dropped; the far
                -- partition (no expiry day of its own) is cleared row by row here.
                DELETE FROM artifacts_payload_far p USING gone
                WHERE p.expiry_bucket = gone.expiry_bucket AND p.artifact_id = gone.id
                RETURNING octet_length(p.body) AS n
            ), tomb AS (
                INSERT INTO artifacts_tombstone (store_id, scope_ns, ref, kind, bytes, digest, reason,
                                                 expired_at, swept_at)
                SELECT store_id, scope_ns, ref, kind, bytes, digest,
                       CASE WHEN deleted_at IS NOT NULL THEN 'deleted' ELSE 'ttl' END, expires_at, now()
                FROM gone
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM tomb), (SELECT coalesce(sum(n), 0) FROM far)
            """,  # noqa: S608 - condition and order are the constants above
            {"now": now, "horizon": horizon, "batch": batch},
        )
        swept, far_bytes = cursor.fetchone()
    return int(swept), int(far_bytes)


def _day_end_ms(day: Any) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000) + 86_400_000


def _drop_partition(cursor: Any, name: str) -> int:
    """Detach and drop the partition; returns its size."""
    cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [name])
    size = int(cursor.fetchone()[0])
    partition_detach_and_drop(cursor, "artifacts_payload", name)
    return size


# --- test hooks (mounted only when FOOTPRINT_TEST_HOOKS=1) ---------------------------------


@transaction.atomic
def store_advance_clock(*, store: ArtifactStore, advance_ms: int) -> int:
    ArtifactStore.objects.filter(pk=store.pk).update(clock_offset_ms=store.clock_offset_ms + advance_ms)
    store.refresh_from_db()
    return store_now_ms(store)


@transaction.atomic
def artifact_corrupt(*, store: ArtifactStore, scope: Scope, ref: str) -> bool:
    artifact = Artifact.objects.filter(store=store, scope_ns=scope.namespace, ref=ref).first()
    if artifact is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE artifacts_payload SET body = %s WHERE expiry_bucket = %s AND artifact_id = %s",
            [b"tampered bytes", artifact.expiry_bucket, artifact.pk],
        )
    return True


RETENTION_DIALS = ("ttl_ms", "max_ttl_ms", "max_bytes_per_scope", "max_count_per_scope")


@transaction.atomic
def store_update_retention(
    *,
    store: ArtifactStore,
    user: User,
    ttl_ms: int | None,
    max_ttl_ms: int | None,
    max_bytes_per_scope: int | None,
    max_count_per_scope: int | None,
) -> ArtifactStore:
    """Change a store's dials. New values apply to puts from now on; stated expiries never change.

    Writes the store row and a RETENTION_CHANGED AdminChange naming `user`, with the dials that
    changed (before and after, as stored); saving the same values writes nothing. The row is locked
    and read afresh, so the recorded `before` is what the change replaced, not what a form saw.
    Raises ValidationError for a dial the database would refuse, writing nothing.
    """
    current = ArtifactStore.objects.select_for_update().get(pk=store.pk)
    wanted = {
        "ttl_ms": ttl_ms,
        "max_ttl_ms": max_ttl_ms,
        "max_bytes_per_scope": max_bytes_per_scope,
        "max_count_per_scope": max_count_per_scope,
    }
    for name, value in wanted.items():
        setattr(store, name, value)
    store.full_clean(exclude=["project"])
    changed = [name for name in RETENTION_DIALS if getattr(current, name) != wanted[name]]
    if not changed:
        return store
    store.save(update_fields=changed)
    admin_change_record(
        actor=Actor.of_user(user),
        action=AdminChange.Action.RETENTION_CHANGED,
        project=Project(pk=store.project_id),
        target_type="artifact store",
        target_id=store.pk,
        target_label="artifact retention",
        before={name: getattr(current, name) for name in changed},
        after={name: wanted[name] for name in changed},
    )
    return store
