"""The framework's scope tuple `{tenant?, principal?, conversationId}`, carried in `AF-Scope`.

Pure functions. The namespace key is encoding A of the artifacts spec (§3.3), byte-identical
to `sqliteArtifacts.scope_ns`, and injective: no two scopes share a key.
"""

import base64
import binascii
from dataclasses import dataclass

import orjson

from artifacts.exceptions import InvalidScope
from footprint_site.exceptions import MalformedBody
from footprint_site.lib.jsonbody import parse_json

SCOPE_FIELDS = ("tenant", "principal", "conversationId")
MAX_FIELD_CHARS = 1024
# The namespace key sits in two btree indexes, and PostgreSQL refuses an index row over 2704
# bytes (a database error, not an answer). Fields within MAX_FIELD_CHARS can still encode to
# several times that: CJK is 3 bytes a character, and '/' and '%' are escaped to 3. The bound is in
# bytes, and leaves room for the store id, created_at, ref and row header beside the key.
MAX_NAMESPACE_BYTES = 2048
HEADER_HELP = (
    "Send the scope as the AF-Scope header: base64url of the UTF-8 JSON "
    '{"tenant"?, "principal"?, "conversationId"}, each a string.'
)


@dataclass(frozen=True, slots=True)
class Scope:
    tenant: str | None
    principal: str | None
    conversation: str | None

    @property
    def namespace(self) -> str:
        return "/".join(_encode_field(v) for v in (self.tenant, self.principal, self.conversation))


def _encode_field(value: str | None) -> str:
    if not value:  # None and "" both mean absent (spec §3.1)
        return "_"
    encoded = value.replace("%", "%25").replace("/", "%2F")
    return "%5F" if encoded == "_" else encoded


def scope_from_json(document: object) -> Scope:
    """Check a decoded scope object. Messages name fields, never values (a scope is personal data)."""
    if not isinstance(document, dict):
        raise InvalidScope(f"The scope must be a JSON object. {HEADER_HELP}")
    unknown = document.keys() - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidScope(
            f"The scope has unknown fields ({len(unknown)}); it takes only tenant, principal "
            f"and conversationId. {HEADER_HELP}"
        )
    values: list[str | None] = []
    for field in SCOPE_FIELDS:
        value = document.get(field)
        if value is not None and not isinstance(value, str):
            raise InvalidScope(f"The scope's {field} must be a string when present. {HEADER_HELP}")
        if value is not None and "\x00" in value:
            raise InvalidScope(f"The scope's {field} contains the character U+0000, which no scope may hold.")
        if value is not None and len(value) > MAX_FIELD_CHARS:
            raise InvalidScope(f"The scope's {field} is longer than {MAX_FIELD_CHARS} characters.")
        values.append(value or None)
    scope = Scope(*values)
    size = len(scope.namespace.encode())
    if size > MAX_NAMESPACE_BYTES:
        raise InvalidScope(
            f"The scope's tenant, principal and conversationId come to {size} bytes as this store keys them "
            f"(UTF-8, with each '/' and '%' written as 3 bytes); a scope may take at most {MAX_NAMESPACE_BYTES} "
            "bytes. Send shorter values: an id rather than a name, or a hash of a long value."
        )
    return scope


def scope_from_header(header: str | None) -> Scope:
    if not header:
        raise InvalidScope(f"This operation needs a scope. {HEADER_HELP}")
    try:
        raw = base64.urlsafe_b64decode(header.strip() + "=" * (-len(header.strip()) % 4))
        document = parse_json(raw)
    except (binascii.Error, ValueError):
        raise InvalidScope(f"The AF-Scope header is not base64url-encoded JSON. {HEADER_HELP}") from None
    except MalformedBody as exc:
        raise InvalidScope(f"The AF-Scope header's JSON is not usable: {exc.message} {HEADER_HELP}") from None
    return scope_from_json(document)


def scope_header(scope: dict[str, str]) -> str:
    """Encode a scope for the AF-Scope header (used by clients and tests)."""
    return base64.urlsafe_b64encode(orjson.dumps(scope)).decode().rstrip("=")
