"""Reading jsonb back the way the server read the JSON in the first place."""

import json
from typing import Any


def _int_or_float(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)


class JsonbDecoder(json.JSONDecoder):
    """Integers beyond 64 bits come back as doubles, as JavaScript (and the ingest parser) read
    them: jsonb keeps their digits exactly, and an exact 2**70 could never be written back out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parse_int", _int_or_float)
        super().__init__(*args, **kwargs)
