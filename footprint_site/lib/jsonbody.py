"""JSON bodies as every endpoint reads them: strict (a key given twice is refused, nesting is
bounded), or as the framework's JavaScript reads and writes them where its bytes must be matched
(an event stream keeps a repeated key's last value; lone surrogate escapes). Also what text a
database column or a page can hold. Compiled with the ingestion hot path.
"""

import json
import re
from typing import Any, Final

import orjson

from footprint_site.exceptions import MalformedBody
from footprint_site.lib.jsontext import is_lone_surrogate_refusal, loads_keeping_lone_surrogates


def parse_stream_json(body: bytes) -> Any:
    """An event stream (events, recordings), read as the framework's JavaScript reads JSON: a
    repeated key keeps its last value. Only the canonical form of what was read is hashed, so the
    ledger is unambiguous; the framework's JSON.stringify never writes a key twice anyway.

    A lone UTF-16 surrogate escape (`\\ud83d` alone: JSON.stringify writes half an emoji cut from
    a string so) is read as U+FFFD: UTF-8, and so the stored bytes, cannot carry it, and refusing
    it would drop the agent's whole batch for one character."""
    try:
        return _read_json(body)
    except MalformedBody as exc:
        if not is_lone_surrogate_refusal(exc):
            raise
    try:
        document = loads_keeping_lone_surrogates(body.decode("utf-8"))
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise MalformedBody(f"The body is not valid JSON: {exc}.") from None
    if nests_deeper_than(document, MAX_DEPTH):
        raise _too_deep()
    return _replaced(document, LONE_SURROGATES)  # U+0000 is kept: the canonical bytes escape it


def _read_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):  # orjson reads up to 1,024 levels
            raise _too_deep() from None
        raise MalformedBody(f"The body is not valid JSON: {exc}.") from None


def parse_json(body: bytes) -> Any:
    """Any other JSON body (asks, decisions, bundles, artifacts, scopes): a key given twice in
    one object is refused, since two readers could take two different meanings from it."""
    document = _read_json(body)
    try:
        orjson.dumps(document)  # what is read must be writable back: orjson stops at MAX_DEPTH levels
        json.loads(body, object_pairs_hook=_unique_keys)
    except (orjson.JSONEncodeError, RecursionError):
        raise _too_deep() from None
    except _DuplicateKey as exc:
        raise _repeated(exc) from None
    return document


def parse_json_keeping_lone_surrogates(body: bytes) -> Any:
    """`parse_json`, except that a lone UTF-16 surrogate escape (`\\ud83d` alone) is read, not refused.

    For audit bundles: the framework cuts long strings at 255 UTF-16 units (spec §5.3), which
    can split an emoji, and its canonical form writes the half left over as that escape (§5.5).
    orjson refuses it; Python's reader keeps it as a lone surrogate, which the bundle's hashes
    cover. Every other refusal of `parse_json` still applies.
    """
    try:
        return parse_json(body)
    except MalformedBody as exc:
        if not is_lone_surrogate_refusal(exc):
            raise
    try:
        document = loads_keeping_lone_surrogates(body.decode("utf-8"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise _too_deep() from None
    except _DuplicateKey as exc:
        raise _repeated(exc) from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise MalformedBody(f"The body is not valid JSON: {exc}.") from None
    if nests_deeper_than(document, MAX_DEPTH):  # orjson's write-back limit, which parse_json holds to
        raise _too_deep()
    return document


def parse_json_encoded_as_javascript(body: bytes) -> Any:
    """`parse_json`, except that a lone UTF-16 surrogate escape (`\\ud83d` alone) is read as
    U+FFFD, the character JavaScript's TextEncoder writes for it.

    For artifacts: the framework counts a text's bytes, and hashes them, after TextEncoder, and
    its JSON.stringify writes half an emoji cut by `slice` as that escape; orjson refuses it.
    """
    return _replaced(parse_json_keeping_lone_surrogates(body), LONE_SURROGATES)


def _too_deep() -> MalformedBody:
    return MalformedBody(f"The body nests deeper than {MAX_DEPTH} levels of arrays and objects.")


def _repeated(exc: "_DuplicateKey") -> MalformedBody:
    return MalformedBody(f"Duplicate key '{exc.key}': give each key of an object once.")


def nests_deeper_than(document: Any, limit: int) -> bool:
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)
    return False


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key[:100])
            seen.add(key)
    return document


# orjson writes at most this many levels of nesting; deeper documents are refused as input.
MAX_DEPTH: Final = 254


def json_holds_nul(text: bytes) -> bool:
    """Whether JSON text (as orjson writes it) holds U+0000, which it escapes as \\u0000. Also yes
    for the text of a backslash followed by "u0000": a caller that replaces then changes nothing.

    Searched in two steps because it runs on every ingested body: most hold no backslash at all,
    which memchr tells in microseconds, and CPython searches a long text for a 5-byte needle
    several times faster than for the 6-byte one (which takes its two-way search): 0.2 ms for a
    320 KB body, against 3 µs without a backslash and 50 µs with one."""
    at = text.find(b"\\")
    while at != -1:
        at = text.find(b"\\u000", at)
        if at == -1:
            return False
        if text[at + 5 : at + 6] == b"0":
            return True
        at += 5
    return False


def text_copy(value: Any) -> Any:
    """The value with U+0000 and lone surrogates replaced by U+FFFD: what text and jsonb columns,
    pages and JSON answers can hold (a bundle's bytes keep the truth). For values read by
    `parse_json_keeping_lone_surrogates`; what orjson read holds no lone surrogate, and
    `replace_nul` (a plain replace, on the ingestion hot path) is all it needs."""
    return _replaced(value, UNSTORABLE_CHARACTERS)


def _replaced(value: Any, characters: re.Pattern[str]) -> Any:
    """The value with every one of `characters`, in keys and strings alike, replaced by U+FFFD."""
    if isinstance(value, str):
        return characters.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replaced(v, characters) for v in value]
    if isinstance(value, dict):
        return {_replaced(k, characters): _replaced(v, characters) for k, v in value.items()}
    return value


UNSTORABLE_CHARACTERS: Final = re.compile(r"[\x00\ud800-\udfff]")  # re reads the escapes: no surrogate in the source


LONE_SURROGATES: Final = re.compile(r"[\ud800-\udfff]")
