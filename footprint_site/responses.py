from typing import Any

import orjson
from django.http import HttpResponse


def json_response(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data), status=status, content_type="application/json")
