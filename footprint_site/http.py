"""Reading request bodies within a stated limit, the one way every endpoint does it."""

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.http.request import RawPostDataException

from ledger.exceptions import BodyTooLarge, UnsupportedMediaType


def body_within(request: HttpRequest, limit: int, *, json: bool = True) -> bytes:
    """The body, or BodyTooLarge naming the limit (checked on Content-Length before reading).

    A JSON body must say so (`Content-Type: application/json`): a form post or text that happens
    to parse is refused with 415 rather than guessed at.
    """
    if json and request.content_type != "application/json":
        sent = request.content_type or "no Content-Type"
        raise UnsupportedMediaType(f"Send the body as Content-Type: application/json (this request sent {sent}).")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if json and encoding not in ("", "identity"):
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding} is not accepted here: send the JSON uncompressed "
            "(only /v1/traces takes gzip)."
        )
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {declared}.", limit=limit)
    try:
        body = request.body
    except (RequestDataTooBig, RawPostDataException):
        raise BodyTooLarge(f"A request body may be at most {limit} bytes.", limit=limit) from None
    if len(body) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {len(body)}.", limit=limit)
    return body
