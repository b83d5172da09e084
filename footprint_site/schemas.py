"""What every API router shares: inputs that refuse unknown fields, a body checked against its schema
with the operation's own error code, and the one error answer."""

from typing import Any, TypeVar

import pydantic
from ninja import Schema
from ninja.errors import ValidationError
from pydantic import ConfigDict


class StrictIn(Schema):
    """An input that names a field it does not know rather than ignoring it."""

    model_config = ConfigDict(extra="forbid")


In = TypeVar("In", bound=StrictIn)


class BodyInvalid(ValidationError):
    """A JSON body that does not fit its schema, answered with the operation's own error code
    (the API's one ValidationError handler writes the `{error, code, detail}` answer)."""

    def __init__(self, errors: list[dict[str, Any]], *, code: str, status: int = 422) -> None:
        super().__init__(errors)
        self.code = code
        self.status = status


def body_fields(schema: type[In], document: dict[str, Any], *, code: str) -> In:
    """The body's fields checked against `schema`; BodyInvalid names any field it does not know.
    The values sent are left out of the answer: a field may carry what the client keeps secret."""
    try:
        return schema.model_validate(document)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise BodyInvalid([dict(e) for e in errors], code=code) from None


class ErrorOut(Schema):
    """A sentence and a stable code; some errors add what they are about (`limit`, `detail`, …)."""

    model_config = ConfigDict(extra="allow")

    error: str
    code: str


# Every status an operation may answer with `{error, code}` (500 included: the handler's shape).
ERRORS = {status: ErrorOut for status in (400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503)}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI's description of a JSON body an operation reads by hand (it takes no ninja body)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
