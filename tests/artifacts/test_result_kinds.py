"""Tool result kinds (9.70 `Tool.resultKind`): a placed result is minted under the tool's declared
kind or `tool-result/<toolName>`; the store keeps it as sent, `wants` matches it exactly, and the
artifact page says whose result it is."""

from typing import Any

import pytest

from artifacts.kinds import default_result_tool
from tenancy.models import Membership
from tenancy.services import membership_grant
from tests.artifacts.conftest import StoreClient, StoreRefused

pytestmark = pytest.mark.django_db

SCOPE = {"tenant": "acme", "principal": "analyst", "conversationId": "c-kinds"}
ROWS = [{"region": "EU", "total": 12}]
SCHEMA = {"type": "object", "properties": {"dataset": {"type": "string"}}}
# The framework puts no character rule on a declared kind (only non-blank): any of these is one.
DECLARED_KINDS = (
    "dataset/rows",
    "Sales Rows (Q3) — v2",
    "tool-result/export_rows/extra segment",
    "rows.csv?x=1&y=2#frag",
    "ß/行/🙂",
    " spaced kind ",
)


@pytest.fixture
def store(harness: Any) -> StoreClient:
    return harness.create_store()


def _placed(store: StoreClient, kind: str) -> str:
    meta, _ = store.put(
        SCOPE, kind=kind, media_type="application/json", data=ROWS, origin={"runId": "run-1", "toolCallId": "h3"}
    )
    assert meta["kind"] == kind
    return meta["ref"]


@pytest.mark.parametrize("kind", ["tool-result/export_rows", *DECLARED_KINDS])
def test_a_result_kind_is_stored_and_resolved_exactly_as_declared(store, kind):
    ref = _placed(store, kind)
    assert store.head(SCOPE, ref)["kind"] == kind
    assert store.get(SCOPE, ref).data == ROWS
    result = store.resolve(SCOPE, "render_chart", {"dataset": kind}, {"dataset": ref}, SCHEMA)
    assert result["ok"] is True
    assert result["args"] == {"dataset": ROWS}


def test_wants_never_matches_a_kind_loosely(store):
    ref = _placed(store, "tool-result/export_rows")
    for wanted in ("dataset/rows", "tool-result/", "tool-result/export_rows ", "Tool-Result/export_rows"):
        result = store.resolve(SCOPE, "render_chart", {"dataset": wanted}, {"dataset": ref}, SCHEMA)
        assert result["ok"] is False
        (refusal,) = result["refusals"]
        assert refusal["reason"] == "kind-mismatch"
        assert "it is 'tool-result/export_rows'" in refusal["detail"]


@pytest.mark.parametrize(("kind", "sent"), [(" \t", '" \\t"'), ("", '""')])
def test_a_blank_result_kind_is_still_refused(store, kind, sent):
    with pytest.raises(StoreRefused) as refused:
        _placed(store, kind)
    assert refused.value.status == 422
    assert f"kind is {sent}." in refused.value.body["error"]


def test_default_result_tool_reads_only_the_default_vocabulary():
    assert default_result_tool("tool-result/export_rows") == "export_rows"
    assert default_result_tool("tool-result/") is None
    assert default_result_tool("dataset/rows") is None
    assert default_result_tool("x/tool-result/export_rows") is None


def test_artifact_page_says_a_default_kind_is_that_tool_result(store, client, django_user_model):
    ref = _placed(store, "tool-result/export_<rows>")
    declared = _placed(store, "dataset/rows")
    user = django_user_model.objects.create_user(username="reader", password="pw")
    membership_grant(user=user, project=store.project, role=Membership.Role.AUDITOR)
    client.force_login(user)
    html = client.get(f"/projects/{store.project_slug}/artifacts/{ref}/").content.decode()
    assert "<code>tool-result/export_&lt;rows&gt;</code>" in html
    assert "the default result kind of tool <code>export_&lt;rows&gt;</code>" in html
    html = client.get(f"/projects/{store.project_slug}/artifacts/{declared}/").content.decode()
    assert "minted during tool call <code>h3</code>" in html
