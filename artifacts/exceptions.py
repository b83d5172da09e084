"""Errors of the artifact port, with the framework's codes (a client re-raises on `code`)."""

from typing import Any

from footprint_site.exceptions import ApiError


class ArtifactError(ApiError):
    pass


class InvalidArtifact(ArtifactError):
    status = 422
    code = "ERR_INVALID_ARTIFACT"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"[artifacts] put refused: {reason}", **details)


class UnknownParentRef(ArtifactError):
    status = 422
    code = "ERR_UNKNOWN_PARENT_REF"


class ArtifactNotFound(ArtifactError):
    status = 404
    code = "ERR_ARTIFACT_NOT_FOUND"


class ArtifactIntegrity(ArtifactError):
    status = 500
    code = "ERR_ARTIFACT_INTEGRITY"


class InvalidScope(ArtifactError):
    status = 400
    code = "ERR_INVALID_SCOPE"


class InvalidWants(ArtifactError):
    status = 422
    code = "ERR_INVALID_WANTS"


class ArtifactBodyTooLarge(ArtifactError):
    status = 413
    code = "ERR_INVALID_ARTIFACT"
