import logging
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, QueryDict

from footprint_site.errors import api_error, is_api_request

logger = logging.getLogger(__name__)

# No inline scripts or styles anywhere: trace content is untrusted and must never execute.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RequestHygieneMiddleware:
    """Refuses, before any view runs, what no page or operation can answer sensibly:

    - U+0000 in a query parameter (PostgreSQL text cannot hold it): a 422 naming it on the API,
      while pages drop the value as they drop any filter value that does not parse, and a cursor
      is dropped everywhere, as every bad cursor restarts its listing (in a path, the lookups
      themselves answer their usual 404: no identifier holds U+0000);
    - a form (human pages) over the size or field limits: 413 naming the limit, not a bare 400;
    - form data that is not UTF-8, which Django would otherwise quietly turn into U+FFFD.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = self._url_problem(request) or self._form_problem(request)
        if problem is not None:
            return _refusal(request, *problem)
        return self.get_response(request)

    @staticmethod
    def _url_problem(request: HttpRequest) -> tuple[int, str, str] | None:
        pairs = [(key, value) for key, values in request.GET.lists() for value in values]
        tainted = [key for key, value in pairs if "\x00" in key + value]
        if not tainted:
            return None
        refused = [key for key in tainted if key != "cursor"]
        if is_api_request(request) and refused:
            return 422, "ERR_INVALID_PARAMETERS", f"The query parameter '{refused[0][:100]}' contains U+0000."
        kept = QueryDict(mutable=True)
        for key, value in pairs:
            if "\x00" not in key + value:
                kept.appendlist(key, value)
        kept._mutable = False
        request.GET = kept  # type: ignore[assignment]
        request.META["QUERY_STRING"] = kept.urlencode()
        return None

    @staticmethod
    def _form_problem(request: HttpRequest) -> tuple[int, str, str] | None:
        if request.method != "POST" or request.content_type not in FORM_TYPES or is_api_request(request):
            return None  # the API takes JSON and says so itself (415)
        try:
            if request.content_type == FORM_TYPES[0]:
                _check_utf8_form(request.body)
            fields = request.POST  # parsing enforces Django's size and count limits here
        except RequestDataTooBig:
            return 413, "ERR_TOO_LARGE", f"A form may carry at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
        except (TooManyFieldsSent, TooManyFilesSent):
            return 413, "ERR_TOO_LARGE", f"A form may carry at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields."
        except UnicodeDecodeError:
            return 400, "ERR_BAD_REQUEST", "The form data is not valid UTF-8."
        # Django decodes a multipart field's bytes with U+FFFD for what is not UTF-8, and the
        # bytes are gone: a U+FFFD there is taken as such (only the bundle upload posts
        # multipart, and it carries no text of a person's).
        if request.content_type == FORM_TYPES[1] and any(
            "\ufffd" in key + "".join(values) for key, values in fields.lists()
        ):
            return 400, "ERR_BAD_REQUEST", "The form data is not valid UTF-8."
        return None


def _refusal(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """What a client reads: the API's error shape for programs, the sentence for a page."""
    if is_api_request(request):
        return api_error(request, status, code, message)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def _check_utf8_form(body: bytes) -> None:
    for pair in body.split(b"&"):
        unquote_to_bytes(pair.replace(b"+", b" ")).decode("utf-8")


# SQLSTATE classes of a server that is unreachable, shutting down or out of resources: worth a
# retry. Other "operational" errors (an index row too large, say) fail the same way every time.
UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57", "58")
# A transaction PostgreSQL rolled back to break a deadlock (or a serialization failure): the
# same request succeeds once the one it met has committed.
ROLLED_BACK_SQLSTATE_CLASS = "40"


def _sqlstate(exception: Exception) -> str | None:
    return getattr(exception.__cause__, "sqlstate", None)  # None: the connection itself failed


def _is_the_statements_fault(exception: Exception) -> bool:
    sqlstate = _sqlstate(exception)
    return sqlstate is not None and not sqlstate.startswith((*UNAVAILABLE_SQLSTATE_CLASSES, ROLLED_BACK_SQLSTATE_CLASS))


class DatabaseUnavailableMiddleware:
    """While PostgreSQL is unreachable (restarting, failing over), answer 503 with Retry-After:
    clients retry, and nothing was acknowledged, so nothing is lost."""

    RETRY_AFTER_SECONDS = 2

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError) or _is_the_statements_fault(exception):
            return None
        if (_sqlstate(exception) or "").startswith(ROLLED_BACK_SQLSTATE_CLASS):
            logger.warning("transaction rolled back by PostgreSQL: %s", type(exception.__cause__).__name__)
            message = "This request met a concurrent one and was rolled back; nothing was stored. Retry it."
            code = "ERR_TRANSACTION_CONFLICT"
        else:
            logger.warning("database unavailable: %s", type(exception).__name__)
            message = "The database is unavailable; nothing was stored. Retry shortly."
            code = "ERR_DATABASE_UNAVAILABLE"
        response = _refusal(request, 503, code, message)
        response["Retry-After"] = str(self.RETRY_AFTER_SECONDS)
        return response
