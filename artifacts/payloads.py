"""Payload envelopes `{shape, value}` and their canonical bytes (spec §2.4). Pure."""

import base64
import binascii
import json
import math
from typing import Any

import orjson

from artifacts.exceptions import InvalidArtifact

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
        return shape, value.encode("utf-8", errors="surrogatepass")
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
    """Whether `text` is JSON text: what orjson parses, and also an escaped lone surrogate.

    JSON.stringify writes a string holding a lone surrogate as the escape "\\ud800", which the JSON
    grammar allows and orjson refuses. So orjson's refusals are judged again by the standard
    library's parser, held to everything else orjson refuses: the NaN and Infinity literals,
    numbers beyond a double, nesting deeper than the recursion limit, text that is not UTF-8.
    """
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        return True
    try:
        text.encode("utf-8")  # a raw lone surrogate (not an escape) is no UTF-8 text at all
        json.loads(text, parse_constant=_refuse_constant, parse_int=_require_double, parse_float=_require_double)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeEncodeError are ValueErrors
        return False
    return True


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _require_double(number: str) -> None:
    if not math.isfinite(float(number)):
        raise ValueError("the number is beyond a double")


def payload_out(shape: str, body: bytes) -> dict[str, str]:
    if shape == "binary":
        return {"shape": shape, "value": base64.b64encode(body).decode()}
    return {"shape": shape, "value": body.decode("utf-8", errors="surrogatepass")}


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
        return body.decode("utf-8", errors="surrogatepass")
    return payload_out(shape, body)
