"""The claim-check store: metadata rows here; payload bytes in a table partitioned by expiry day.

`ArtifactPayload` is a declarative-partitioned table created by raw SQL in the migrations
(Django does not manage partitions); the sweeper drops whole expired partitions. Times are
unix milliseconds from the store's own clock, as the framework states them.
"""

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from footprint_site.lib.jsonb import JsonbDecoder
from tenancy.models import Project

DAY_MS = 86_400_000


class ArtifactStore(models.Model):
    """One store per project, with its retention dials (editable by the project's admins)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="artifact_store")
    ttl_ms = models.BigIntegerField(null=True, blank=True)
    # The server's ceiling, stamped on every mint so the expiry is stated, never sprung.
    max_ttl_ms = models.BigIntegerField(null=True, blank=True, default=30 * DAY_MS)
    max_bytes_per_scope = models.BigIntegerField(null=True, blank=True)
    max_count_per_scope = models.IntegerField(null=True, blank=True)
    # Moved only by the test hooks (FOOTPRINT_TEST_HOOKS=1), so the conformance battery can age
    # artifacts without waiting.
    clock_offset_ms = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ttl_ms__isnull=True) | models.Q(ttl_ms__gt=0), name="store_ttl_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(max_ttl_ms__isnull=True) | models.Q(max_ttl_ms__gt=0),
                name="store_max_ttl_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(max_bytes_per_scope__isnull=True) | models.Q(max_bytes_per_scope__gt=0),
                name="store_max_bytes_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(max_count_per_scope__isnull=True) | models.Q(max_count_per_scope__gt=0),
                name="store_max_count_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"artifact store of {self.project}"


class Artifact(models.Model):
    class Shape(models.TextChoices):
        TEXT = "text"
        JSON = "json"
        BINARY = "binary"

    store = models.ForeignKey(ArtifactStore, on_delete=models.CASCADE, related_name="artifacts", db_index=False)
    # Scope namespace (spec §3.3 A), byte-compared: "C" collation keeps Acme and acme apart.
    scope_ns = models.TextField(db_collation="C")
    ref = models.CharField(max_length=26, db_collation="C")
    scope_tenant = models.TextField(null=True, blank=True)
    scope_principal = models.TextField(null=True, blank=True)
    scope_conversation = models.TextField(null=True, blank=True)
    kind = models.TextField(db_collation="C")
    media_type = models.TextField()
    bytes = models.BigIntegerField()
    label = models.TextField(null=True, blank=True)
    digest = models.CharField(max_length=72, null=True, blank=True)
    created_at = models.BigIntegerField()
    expires_at = models.BigIntegerField(null=True, blank=True)
    expiry_bucket = models.DateField()
    origin = models.JSONField(decoder=JsonbDecoder, null=True, blank=True)
    origin_run_id = models.TextField(null=True, blank=True)
    parent_refs = ArrayField(models.TextField(), null=True, blank=True)
    payload_shape = models.CharField(max_length=8, choices=Shape.choices)
    held = models.BooleanField(default=False)
    # An agent deleted a held artifact: hidden from agents, kept for the auditor until release.
    deleted_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["store", "scope_ns", "ref"], name="artifact_unique_ref"),
            models.CheckConstraint(condition=models.Q(bytes__gte=0), name="artifact_bytes_non_negative"),
        ]
        indexes = [
            models.Index("store", "scope_ns", models.F("created_at").desc(), "ref", name="artifact_list_newest"),
            models.Index(
                fields=["expires_at"],
                name="artifact_sweep",
                condition=models.Q(expires_at__isnull=False, held=False),
            ),
            models.Index(
                fields=["deleted_at"], name="artifact_deleted_while_held", condition=models.Q(deleted_at__isnull=False)
            ),
            models.Index(fields=["store", "ref"], name="artifact_by_ref"),
            models.Index(fields=["store", "origin_run_id"], name="artifact_by_run"),
        ]

    def __str__(self) -> str:
        return self.ref

    def meta(self) -> dict[str, Any]:
        """The framework's ArtifactMeta: absent fields are omitted, never null; the mint's key order."""
        meta: dict[str, Any] = {
            "ref": self.ref,
            "kind": self.kind,
            "mediaType": self.media_type,
            "bytes": self.bytes,
            "createdAt": self.created_at,
        }
        for key, value in (
            ("label", self.label),
            ("digest", self.digest),
            ("expiresAt", self.expires_at),
            ("origin", self.origin),
            ("parentRefs", self.parent_refs),
        ):
            if value is not None:
                meta[key] = value
        return meta


class Tombstone(models.Model):
    """What became of a ref that is gone: swept at expiry, evicted by a budget, or deleted."""

    class Reason(models.TextChoices):
        TTL = "ttl"
        MAX_BYTES = "max-bytes"
        MAX_COUNT = "max-count"
        DELETED = "deleted"

    store = models.ForeignKey(ArtifactStore, on_delete=models.CASCADE, related_name="tombstones", db_index=False)
    scope_ns = models.TextField(db_collation="C")
    ref = models.CharField(max_length=26, db_collation="C")
    kind = models.TextField()
    bytes = models.BigIntegerField()
    digest = models.CharField(max_length=72, null=True, blank=True)
    reason = models.CharField(max_length=16, choices=Reason.choices)
    expired_at = models.BigIntegerField(null=True, blank=True)
    swept_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["store", "ref"], name="tombstone_by_ref")]

    def __str__(self) -> str:
        return f"{self.ref} ({self.reason})"


class ArtifactHold(models.Model):
    """An auditor's hold: while open, the artifact is never swept, evicted or deleted."""

    artifact_ref = models.CharField(max_length=26, db_collation="C")
    store = models.ForeignKey(ArtifactStore, on_delete=models.CASCADE, related_name="holds")
    reason = models.TextField()
    placed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    placed_at = models.DateTimeField(db_default=Now())
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    released_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"hold on {self.artifact_ref}"


class SweepRun(models.Model):
    """The figures of one sweep, kept and shown."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    metadata_rows = models.BigIntegerField(default=0)
    payload_bytes = models.BigIntegerField(default=0)
    partitions_dropped = models.IntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"sweep at {self.started_at:%Y-%m-%d %H:%M:%S}"
