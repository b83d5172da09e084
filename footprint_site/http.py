"""Reading request bodies within a stated limit, the one way every endpoint does it."""

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.http.request import RawPostDataException

from ledger.exceptions import BodyTooLarge


def body_within(request: HttpRequest, limit: int) -> bytes:
    """The body, or BodyTooLarge naming the limit (checked on Content-Length before reading)."""
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
