"""Reading request bodies within a stated limit, the one way every endpoint does it."""

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.http.request import RawPostDataException

from footprint_site.exceptions import BodyTooLarge, LengthRequired, UnsupportedMediaType


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
    if not declared and "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        return _chunked_body(request, limit)
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {declared}.", limit=limit)
    try:
        body = request.body
    except (RequestDataTooBig, RawPostDataException):
        raise BodyTooLarge(f"A request body may be at most {limit} bytes.", limit=limit) from None
    if len(body) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {len(body)}.", limit=limit)
    return body


READ_CHUNK_BYTES = 64 * 1024


def _chunked_body(request: HttpRequest, limit: int) -> bytes:
    """A body sent without a Content-Length (`Transfer-Encoding: chunked`, as the OpenTelemetry JS
    exporter streams every export). Django reads such a request as empty, which would answer 200
    for data never read; the server's input is read here instead: gunicorn has removed the chunk
    framing and ends the input at the body's end, as WSGI's `wsgi.input_terminated` promises. A
    server that does not promise that is answered 411 rather than guessed at."""
    if not request.META.get("wsgi.input_terminated"):
        raise LengthRequired("Send the body with a Content-Length: this server cannot read a chunked body.")
    stream = request.META["wsgi.input"]
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(READ_CHUNK_BYTES, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise BodyTooLarge(f"A request body may be at most {limit} bytes.", limit=limit)
