"""Opaque keyset cursors: a page ends at a row's key and the next page starts after it, so a
listing stays fast however deep it goes and never repeats or skips a row that was added meanwhile.
"""

import base64


def encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """An undecodable cursor restarts the listing rather than failing it."""
    if not cursor:
        return None
    try:
        return int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except ValueError:
        return None
