"""Payload envelopes `{shape, value}` and their canonical bytes (spec §2.4). Pure."""

import base64
import binascii
from typing import Any

import orjson

from artifacts.exceptions import InvalidArtifact
from footprint_site.lib.jsontext import is_lone_surrogate_refusal, loads_keeping_lone_surrogates

SHAPES = ("text", "json", "binary")


def canonical_bytes(payload: Any) -> tuple[str, bytes]:
    """(shape, canonical bytes) of a put's payload; refuses anything not exactly one of the shapes.

    A `json` value is the exact JSON text the client serialized (JS `JSON.stringify` output): the
    server checks it parses and never re-serializes it, so digests match the framework's.
    """
    if not isinstance(payload, dict) or set(payload) != {"shape", "value"}:
        raise InvalidArtifact('payload must be {"shape": "text" | "json" | "binary", "value": …}.')
    shape, value = payload["shape"], payload["value"]
    if shape not in SHAPES:
        raise InvalidArtifact("payload.shape must be one of text, json or binary.")
    if not isinstance(value, str):
        raise InvalidArtifact(f"payload.value must be a string for shape {shape} (the text, the JSON text, or base64).")
    if shape == "text":
        return shape, value.encode("utf-8")  # the body was read as TextEncoder writes: no lone surrogate
    if shape == "json":
        if not is_json_text(value):
            raise InvalidArtifact(
                "payload.value is not valid JSON text; a json payload carries what JSON.stringify "
                "produced (NaN, Infinity, cycles and functions have no JSON form)."
            )
        return shape, value.encode("utf-8")
    try:
        return shape, base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArtifact("payload.value is not valid base64 for a binary payload.") from None


def is_json_text(text: str) -> bool:
    """Whether `text` is JSON text: what orjson parses, and also an escaped lone surrogate, which
    JSON.stringify writes and orjson refuses (footprint_site.lib.jsontext)."""
    try:
        orjson.loads(text)
        return True
    except orjson.JSONDecodeError as exc:
        if not is_lone_surrogate_refusal(exc):
            return False
    try:
        text.encode("utf-8")  # a raw lone surrogate (not an escape) is no UTF-8 text at all
        loads_keeping_lone_surrogates(text)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeEncodeError are ValueErrors
        return False
    return True


def payload_out(shape: str, body: bytes) -> dict[str, str]:
    if shape == "binary":
        return {"shape": shape, "value": base64.b64encode(body).decode()}
    return {"shape": shape, "value": body.decode("utf-8")}


def payload_data(shape: str, body: bytes) -> Any:
    """The value a tool receives: parsed JSON, the string, or the payload envelope for bytes.

    JSON text that orjson cannot read or cannot write back, though put accepted it (an escaped
    lone surrogate; nesting deeper than the 254 levels orjson writes), is passed on as a fragment:
    the exact stored text, which orjson writes verbatim into the answer.
    """
    if shape == "json":
        try:
            data = orjson.loads(body)
            orjson.dumps(data)  # microseconds for a claim check's payload; a 500 in the answer otherwise
        except orjson.JSONEncodeError:
            return orjson.Fragment(body)
        except orjson.JSONDecodeError:
            if is_json_text(body.decode()):
                return orjson.Fragment(body)
            raise
        return data
    if shape == "text":
        return body.decode("utf-8")
    return payload_out(shape, body)
