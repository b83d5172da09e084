"""Refs are whatever a model speaks: no word is a route, and text cut inside an emoji is kept as JavaScript keeps it."""

import json

import pytest

from artifacts.scopes import scope_header
from tests.artifacts.conftest import RESOLVE

pytestmark = pytest.mark.django_db


def test_get_and_delete_of_strings_named_like_a_route_are_absence_and_agreement(harness, kit):
    """Spec §1.3 / §1.4 / §12.6: get of a non-grammar ref is 404 ERR_ARTIFACT_NOT_FOUND (the one
    answer a remote adapter turns into null) and delete of one is 204 "always". A ref is spoken by
    a model and passed verbatim, so "resolve" or "capabilities" happen: capabilities and resolve
    live beside /artifacts (as the spec's /af/v1/capabilities and /af/v1/wants:resolve), not in it."""
    store = harness.create_store()
    s = kit.scope("route-names")

    for name in ("resolve", "capabilities", "wants:resolve"):
        got = store.get_raw(s, name)
        assert got.status_code == 404, (name, got.status_code, got.content)
        assert got.json()["code"] == "ERR_ARTIFACT_NOT_FOUND"

    for name in ("resolve", "capabilities", "wants:resolve"):
        deleted = store.delete_raw(s, name)
        assert deleted.status_code == 204, (name, deleted.status_code, deleted.content)


def test_text_payload_with_a_lone_surrogate_as_json_stringify_writes_it_is_stored_and_read_back(harness, kit):
    """A JavaScript string cut by UTF-16 length (`s.slice(0, n)`) can end in half an emoji; the
    framework's JSON.stringify writes that half as the escape `\\ud83d`, which is valid JSON text
    (RFC 8259 §7). The framework counts and hashes the text's bytes after TextEncoder, which writes
    U+FFFD for the half: so does the store."""
    store = harness.create_store()
    s = kit.scope("lone-surrogate-text")
    body = '{"kind":"tool-result/search","mediaType":"text/plain","payload":{"shape":"text","value":"ab\\ud83d"}}'

    put = store.put_raw(s, body)
    assert put.status_code == 201, (put.status_code, put.content)
    meta = put.json()["meta"]
    assert meta["bytes"] == 5  # "ab" and U+FFFD, as TextEncoder writes the lone half

    got = store.get_raw(s, meta["ref"])
    assert got.status_code == 200, (got.status_code, got.content)
    assert json.loads(got.content)["payload"]["value"] == "ab\ufffd"


def test_a_resolve_body_over_the_limit_is_refused_as_a_resolve_not_as_a_put(agent_client, settings):
    settings.FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES = 100
    headers = {"AF-Scope": scope_header({"conversationId": "c1"})}
    document = {"toolName": "t", "wants": {}, "args": {"x": "y" * 200}}

    response = agent_client.post(RESOLVE, document, content_type="application/json", headers=headers)

    assert response.status_code == 413
    assert response.json()["code"] == "ERR_TOO_LARGE"
    assert "put" not in response.json()["error"]
    assert "100 bytes" in response.json()["error"]
