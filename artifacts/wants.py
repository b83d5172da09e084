"""`wants` resolution (spec §6), ported from the seed `artifacts/wants.js` sentence for sentence.

Reads only: it resolves refs through the store's own get and list, under the request's scope.
"""

from dataclasses import dataclass
from typing import Any

from artifacts.exceptions import ArtifactIntegrity, ArtifactNotFound, InvalidWants
from artifacts.models import ArtifactStore
from artifacts.payloads import payload_data
from artifacts.scopes import Scope
from artifacts.selectors import artifact_get, artifact_list
from footprint_site.lib.js import js_entries, js_has_property, js_own_property, js_string, js_stringify, js_trim

LIVE_REF_LIST_LIMIT = 10
LIVE_REF_SCAN_LIMIT = 200
MAX_LIST_PAGES = 50


def assert_tool_wants(tool_name: str, wants: Any, input_schema: Any) -> None:
    """The definition-time checks (`assertToolWants`), answered as 422 with the same sentences."""
    if not isinstance(wants, dict):
        raise InvalidWants(f"wants must be an object mapping argument names to artifact kinds for tool '{tool_name}'.")
    if not wants:
        raise InvalidWants(
            f"defineTool: tool '{tool_name}' declares wants: {{}} — an empty declaration resolves "
            "nothing and reads as one that does. Name at least one argument "
            "(e.g. wants: { dataset: 'dataset/rows' }), or omit `wants` — absent means no "
            "argument is resolved, exactly as before."
        )
    # JavaScript's `typeof properties === 'object'` holds for an array too, and `in` finds the
    # prototype's names: the sentences follow what the seed does with the schema as sent.
    properties = input_schema.get("properties") if isinstance(input_schema, dict) else None
    if not isinstance(properties, dict | list):
        properties = None
    for arg_name, kind in js_entries(wants):
        if not isinstance(kind, str) or not js_trim(kind):
            raise InvalidWants(
                f"defineTool: tool '{tool_name}' declares wants.{arg_name} = {js_stringify(kind)}, "
                "which is not an artifact kind. The value is the consumer vocabulary the resolved "
                "artifact's meta.kind must equal exactly (e.g. 'dataset/rows')."
            )
        if properties is not None and not js_has_property(properties, arg_name):
            raise InvalidWants(
                f"defineTool: tool '{tool_name}' declares wants.{arg_name}, but inputSchema.properties "
                f"has no '{arg_name}' — the model is never offered that argument, so no ref could "
                "ever arrive to resolve. Add it to inputSchema (type: 'string' — the model passes "
                "the art_… ref), or drop it from `wants`."
            )
        prop = js_own_property(properties, arg_name) if properties is not None else None
        # JS compares against undefined: a "type" key holding null is declared, and refused.
        if isinstance(prop, dict) and "type" in prop and prop["type"] != "string":
            shown = js_string(prop["type"])
            raise InvalidWants(
                f"defineTool: tool '{tool_name}' declares wants.{arg_name}, but inputSchema declares "
                f"that argument as type '{shown}'. A wants-argument is spoken as the "
                "ref STRING (the model routes the ticket, never the bytes) — declare it "
                "{ type: 'string' }."
            )


def _live_refs_of_kind(store: ArtifactStore, scope: Scope, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    scanned = pages = 0
    while True:
        page, next_cursor = artifact_list(store=store, scope=scope, cursor=cursor)
        for artifact in page:
            scanned += 1
            if artifact.kind == kind:
                found.append(artifact.meta())
            if len(found) >= LIVE_REF_LIST_LIMIT or scanned >= LIVE_REF_SCAN_LIMIT:
                return found
        cursor = None if next_cursor == cursor else next_cursor
        pages += 1
        if cursor is None or pages >= MAX_LIST_PAGES:
            return found


def _describe_live_ref(meta: dict[str, Any]) -> str:
    if "label" in meta:
        return f"{meta['ref']} ('{meta['label']}', {meta['bytes']} bytes)"
    return f"{meta['ref']} ({meta['bytes']} bytes)"


INHERITED = object()  # an argument name only Object.prototype holds: a function, or (__proto__) an object


def _describe_spoken(spoken: Any, arg_name: str = "") -> str:
    if spoken is INHERITED:
        return "a object" if arg_name == "__proto__" else "a function"
    if spoken is None:
        return "null"
    if isinstance(spoken, list):
        return "an array"
    if isinstance(spoken, str):
        return "an empty string"
    if isinstance(spoken, bool):
        return "a boolean"
    if isinstance(spoken, int | float):
        return "a number"
    return "a object"  # JavaScript's typeof for a plain object, kept as the framework writes it


def _live_refs_clause(kind: str, live: list[dict[str, Any]]) -> str:
    if not live:
        return (
            f"No live '{kind}' artifacts were in this run's scope when that call was refused — "
            f"produce one first (a tool that stores '{kind}', or re-run the step that minted it)."
        )
    listed = ", ".join(_describe_live_ref(m) for m in live)
    return f"These '{kind}' refs were live in this run's scope when that call was refused: {listed}. Pass one of these."


@dataclass
class Refusal:
    arg_name: str
    kind: str
    reason: str
    detail: str
    ref: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = {"argName": self.arg_name, "kind": self.kind, "reason": self.reason, "detail": self.detail}
        if self.ref is not None:
            out["ref"] = self.ref
        return out


def wants_resolve(
    *, store: ArtifactStore, scope: Scope, tool_name: str, wants: Any, args: Any, input_schema: Any = None
) -> dict[str, Any]:
    """The framework's `resolveToolWants` result: resolved args and metas, or every refusal."""
    assert_tool_wants(tool_name, wants, input_schema)
    if not isinstance(args, dict):
        raise InvalidWants("args must be the tool call's arguments object.")
    required = input_schema.get("required") if isinstance(input_schema, dict) else None
    required_names = {n for n in required if isinstance(n, str)} if isinstance(required, list) else set()
    refusals: list[Refusal] = []
    wanted: dict[str, Any] = {}
    resolved: list[dict[str, Any]] = []
    next_args = dict(args)
    for arg_name, kind in js_entries(wants):
        if not js_has_property(args, arg_name):
            if arg_name not in required_names:
                continue
            refusals.append(
                Refusal(
                    arg_name,
                    kind,
                    "invalid-input",
                    (
                        f"'{arg_name}' is required and no value was passed — this tool declares it wants a "
                        f"'{kind}' artifact there, and the framework resolves the ref BEFORE the tool runs, "
                        f"so the tool is never executed without it. Pass the art_… ref as '{arg_name}'. "
                        f"{_live_refs_clause(kind, _live_refs_of_kind(store, scope, kind))}"
                    ),
                )
            )
            continue
        # `argName in args` also finds Object.prototype's members, which the seed then reads as spoken.
        spoken = args.get(arg_name, INHERITED)
        if not isinstance(spoken, str) or not js_trim(spoken):
            refusals.append(
                Refusal(
                    arg_name,
                    kind,
                    "invalid-input",
                    (
                        f"'{arg_name}' must be an artifact ref STRING (an art_… ticket), not "
                        f"{_describe_spoken(spoken, arg_name)} — this tool declares it wants '{kind}' there and the "
                        "framework resolves the ref for you; never inline the data. "
                        f"{_live_refs_clause(kind, _live_refs_of_kind(store, scope, kind))}"
                    ),
                )
            )
            continue
        try:
            artifact, body = artifact_get(store=store, scope=scope, ref=spoken)
        except ArtifactIntegrity:
            refusals.append(
                Refusal(
                    arg_name,
                    kind,
                    "digest-mismatch",
                    (
                        f"'{arg_name}' = {spoken} failed its integrity re-check — the stored payload no "
                        "longer matches its minted digest, and corrupt bytes are never delivered as "
                        "whole. Re-create the artifact from its source, then pass the new ref."
                    ),
                    ref=spoken,
                )
            )
            continue
        except ArtifactNotFound:
            refusals.append(
                Refusal(
                    arg_name,
                    kind,
                    "missing-or-expired",
                    (
                        f"'{arg_name}' = {spoken} does not resolve in this run's scope — expired, swept, "
                        f"or never stored here. {_live_refs_clause(kind, _live_refs_of_kind(store, scope, kind))}"
                    ),
                    ref=spoken,
                )
            )
            continue
        if artifact.kind != kind:
            refusals.append(
                Refusal(
                    arg_name,
                    kind,
                    "kind-mismatch",
                    (
                        f"'{arg_name}' = {spoken} resolves, but it is '{artifact.kind}' and this "
                        f"argument wants '{kind}' — the wrong parcel for this ticket window. "
                        f"{_live_refs_clause(kind, _live_refs_of_kind(store, scope, kind))}"
                    ),
                    ref=spoken,
                )
            )
            continue
        meta = artifact.meta()
        next_args[arg_name] = payload_data(artifact.payload_shape, body)
        wanted[arg_name] = meta
        resolved.append({"argName": arg_name, "meta": meta})
    if refusals:
        plural = "s" if len(refusals) > 1 else ""
        return {
            "ok": False,
            "refusals": [r.as_json() for r in refusals],
            "refusal": f"Tool '{tool_name}' was not executed — its declared artifact argument{plural} did not "
            "resolve. " + " ".join(r.detail for r in refusals),
        }
    return {"ok": True, "args": next_args, "wanted": wanted, "resolved": resolved}
