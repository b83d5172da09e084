"""The framework's identifiers as the server stores and shows them: short, without U+0000, and for
a run id, usable as one URL path segment. Compiled with the ingestion hot path.
"""

from typing import Any, Final

MAX_ID_LENGTH: Final = 200


RUN_ID_RULE = (
    f"meta.runId must be a non-empty string of at most {MAX_ID_LENGTH} characters, without U+0000 "
    "or '/', and neither '.' nor '..' (the run id names the run in URLs, where clients resolve those)."
)


# Path segments every URL client resolves away (RFC 3986 §5.2.4): a run so named has no page.
DOT_SEGMENTS: Final = (".", "..")


def is_run_id(value: Any) -> bool:
    return is_plain_id(value) and "/" not in value and value not in DOT_SEGMENTS


def is_plain_id(value: Any) -> bool:
    """An identifier the server can store and index: a short non-empty string without U+0000."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and "\x00" not in value
