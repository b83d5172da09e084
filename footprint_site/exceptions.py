"""Errors any API answer can carry: the base every app's errors derive from, and the refusals of a
request itself (its body, size, type and parameters), before any room looks at what it means.
The API answers each as `{error, code}` plus its details, with the status the class declares."""

from typing import Any


class ApiError(Exception):
    status = 400
    code = "ERR_BAD_REQUEST"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class MalformedBody(ApiError):
    status = 400
    code = "ERR_MALFORMED_JSON"


class BodyTooLarge(ApiError):
    status = 413
    code = "ERR_TOO_LARGE"


class LengthRequired(ApiError):
    status = 411
    code = "ERR_LENGTH_REQUIRED"


class InvalidParameter(ApiError):
    """A query parameter that parses but cannot be used (the same code as ninja's own 422)."""

    status = 422
    code = "ERR_INVALID_PARAMETERS"


class UnsupportedMediaType(ApiError):
    status = 415
    code = "ERR_UNSUPPORTED_MEDIA_TYPE"
