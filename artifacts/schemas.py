"""Schemas of the artifact port: what its JSON operations answer, and the fields a put may carry.

The framework's ArtifactMeta omits absent fields rather than sending null, so the operations that
answer metas declare `exclude_unset=True` and leave those fields unset.
"""

from typing import Any

from ninja import Schema
from pydantic import Field

from footprint_site.schemas import StrictIn


class ArtifactPutIn(StrictIn):
    """POST /artifacts; `artifact_put` checks each value in the spec's order and words."""

    kind: Any = None
    mediaType: Any = None
    label: Any = None
    digest: Any = None
    expiresAt: Any = None
    origin: Any = None
    parentRefs: Any = None
    payload: Any = None


class ArtifactMetaOut(Schema):
    ref: str
    kind: str
    mediaType: str
    bytes: int
    createdAt: int = Field(description="Unix ms")
    label: str | None = None
    digest: str | None = None
    expiresAt: int | None = Field(None, description="Unix ms")
    origin: dict[str, Any] | None = None
    parentRefs: list[str] | None = None


class SweptOut(Schema):
    ref: str
    reason: str
    kind: str
    bytes: int


class PutOut(Schema):
    meta: ArtifactMetaOut
    swept: list[SweptOut] = Field(description="what this put's sweep and budgets removed")


class MetaOut(Schema):
    meta: ArtifactMetaOut


class PayloadOut(Schema):
    shape: str = Field(description="text, json or binary")
    value: str = Field(description="the text, the exact JSON text, or base64 bytes")


class ArtifactOut(Schema):
    meta: ArtifactMetaOut
    payload: PayloadOut


class ArtifactListOut(Schema):
    artifacts: list[ArtifactMetaOut]
    cursor: str | None = Field(None, description="present while more pages follow")


class RetentionOut(Schema):
    ttlMs: int | None = None
    maxTtlMs: int | None = None
    maxBytesPerScope: int | None = None
    maxCountPerScope: int | None = None


class CapabilitiesOut(Schema):
    putStream: bool
    getStream: bool
    maxListLimit: int
    defaultListLimit: int
    retention: RetentionOut
    evictionOrder: str
    digestAlgorithms: list[str]
    payloadShapes: list[str]
    maxRequestBytes: int
    resolve: bool


class ResolveOut(Schema):
    """The framework's resolveToolWants result: `args`, `wanted`, `resolved` when ok, else every refusal."""

    ok: bool
    args: dict[str, Any] | None = None
    wanted: dict[str, Any] | None = None
    resolved: list[dict[str, Any]] | None = None
    refusals: list[dict[str, Any]] | None = None
    refusal: str | None = None
