"""Isolation (projects, scopes, the AF-Scope header), list paging, and per-scope budgets.

Scope isolation across projects is the server's own boundary (spec §12.1.1: each key maps to one
project and its store); isolation across scopes is the framework's (§3.5). Budgets follow the
retention plan (§4.4) with the server's oldest-first order (§12.1.8), under one advisory lock per
scope (§12.1.4) — the concurrency tests commit for real (transaction=True) from several threads.
"""

import base64
import threading
from typing import Any

import orjson
import pytest
from django.db import connections

from artifacts.models import Artifact, ArtifactStore, Tombstone
from artifacts.services import artifact_hold_place, store_for_project
from tests.artifacts.conftest import API, StoreClient, StoreRefused, orm_put_many

pytestmark = pytest.mark.django_db

UNKNOWN = "art_" + "z" * 22


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- isolation across projects -------------------------------------------------------------------
def test_isolation_another_projects_key_cannot_head_get_list_or_delete_a_ref(harness, kit):
    mine, theirs = harness.create_store(), harness.create_store()
    s = kit.scope("same-scope-both-projects")
    meta, _ = mine.put(s, kind="dataset/rows", media_type="text/plain", data="ours alone", label="ours")
    ref = meta["ref"]

    for fetch in (theirs.head_raw, theirs.get_raw):
        response = fetch(s, ref)
        assert response.status_code == 404
        assert response.json()["code"] == "ERR_ARTIFACT_NOT_FOUND"
        assert b"ours alone" not in response.content
    assert theirs.list(s) == {"artifacts": []}
    assert theirs.delete_raw(s, ref).status_code == 204

    record = mine.get(s, ref)
    assert record is not None
    assert record.data == "ours alone"
    assert not Tombstone.objects.filter(ref=ref).exists()


def test_isolation_another_projects_key_cannot_resolve_parent_or_corrupt_a_ref(harness, kit):
    mine, theirs = harness.create_store(), harness.create_store()
    s = kit.scope("probe")
    meta, _ = mine.put(s, kind="dataset/rows", media_type="application/json", data=[1], digest="sha-256")
    ref = meta["ref"]

    result = theirs.resolve(s, "render_chart", {"dataset": "dataset/rows"}, {"dataset": ref})
    assert result["ok"] is False
    assert result["refusals"][0]["reason"] == "missing-or-expired"

    with pytest.raises(StoreRefused) as caught:
        theirs.put(s, kind="child", media_type="application/json", data={}, parent_refs=[ref])
    assert caught.value.code == "ERR_UNKNOWN_PARENT_REF"

    response = theirs.post("/api/v1/testing/corrupt", None, {"scope": s, "ref": ref})
    assert response.status_code == 404
    record = mine.get(s, ref)
    assert record is not None
    assert record.data == [1]


def test_isolation_requests_without_an_artifacts_key_are_refused(anonymous_api_client, ingest_only_client, kit):
    header = {"AF-Scope": b64url(orjson.dumps(kit.scope("auth")))}
    anonymous = anonymous_api_client.get(API, headers=header)
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "ERR_UNAUTHENTICATED"
    wrong_scope = ingest_only_client.get(API, headers=header)
    assert wrong_scope.status_code == 403
    assert wrong_scope.json()["code"] == "ERR_SCOPE"


# --- isolation across scopes ---------------------------------------------------------------------
OWNER = {"tenant": "acme-corp", "principal": "analyst-42", "conversationId": "conv-1"}


@pytest.mark.parametrize(
    "neighbour",
    [
        {**OWNER, "conversationId": "conv-2"},
        {**OWNER, "tenant": "acme-corp-2"},
        {**OWNER, "principal": "analyst-43"},
        {"principal": "analyst-42", "conversationId": "conv-1"},
        {"tenant": "acme-corp", "conversationId": "conv-1"},
        {"conversationId": "conv-1"},
        {**OWNER, "tenant": "ACME-CORP"},
    ],
    ids=["conversation", "tenant", "principal", "no-tenant", "no-principal", "conversation-only", "case"],
)
def test_isolation_a_neighbour_scope_sees_nothing_and_deletes_nothing(harness, neighbour):
    store = harness.create_store()
    meta, _ = store.put(OWNER, kind="dataset/rows", media_type="text/plain", data="owner's", label="owner")
    ref = meta["ref"]

    assert store.head(neighbour, ref) is None
    assert store.get(neighbour, ref) is None
    assert store.list(neighbour) == {"artifacts": []}
    store.delete(neighbour, ref)
    result = store.resolve(neighbour, "t", {"d": "dataset/rows"}, {"d": ref})
    assert result["refusals"][0]["reason"] == "missing-or-expired"
    assert result["refusals"][0]["detail"].endswith(  # the owner's ref is not offered as live
        "No live 'dataset/rows' artifacts were in this run's scope when that call was refused — produce one first "
        "(a tool that stores 'dataset/rows', or re-run the step that minted it)."
    )

    assert store.head(OWNER, ref) is not None
    assert Artifact.objects.filter(ref=ref).count() == 1
    assert not Tombstone.objects.filter(ref=ref).exists()


# --- the AF-Scope header --------------------------------------------------------------------------
SECRETS = ("TENANT-SECRET-81", "PRINCIPAL-SECRET-77", "CONV-SECRET-5", "ROLE-SECRET-3")
MALFORMED_SCOPES = {
    "not-base64": "***not base64 at all***",
    "not-json": b64url(b"TENANT-SECRET-81 is not json"),
    "not-an-object-array": b64url(orjson.dumps(["TENANT-SECRET-81", "PRINCIPAL-SECRET-77"])),
    "not-an-object-string": b64url(orjson.dumps("TENANT-SECRET-81")),
    "not-an-object-null": b64url(b"null"),
    "unknown-field": b64url(
        orjson.dumps(
            {
                "tenant": "TENANT-SECRET-81",
                "principal": "PRINCIPAL-SECRET-77",
                "conversationId": "c",
                "role": "ROLE-SECRET-3",
            }
        )
    ),
    "non-string-tenant": b64url(
        orjson.dumps({"tenant": 81, "principal": "PRINCIPAL-SECRET-77", "conversationId": "CONV-SECRET-5"})
    ),
    "non-string-conversation": b64url(
        orjson.dumps({"tenant": "TENANT-SECRET-81", "conversationId": ["CONV-SECRET-5"]})
    ),
    "missing": None,
    "empty": "",
}
VERBS = {
    "put": lambda c, h: c.put_raw(
        h, {"kind": "k", "mediaType": "text/plain", "payload": {"shape": "text", "value": "PAYLOAD-SECRET"}}
    ),
    "head": lambda c, h: c.head_raw(h, UNKNOWN),
    "get": lambda c, h: c.get_raw(h, UNKNOWN),
    "delete": lambda c, h: c.delete_raw(h, UNKNOWN),
    "list": lambda c, h: c.list_raw(h),
    "resolve": lambda c, h: c.resolve_raw(h, "t", {"d": "k"}, {"d": UNKNOWN}),
}


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize("case", list(MALFORMED_SCOPES))
def test_scope_header_malformed_is_refused_without_quoting_it(harness, case, verb):
    store = harness.create_store()
    header = MALFORMED_SCOPES[case]
    response = VERBS[verb](store, header)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "ERR_INVALID_SCOPE"
    assert set(body) == {"error", "code"}
    for secret in (*SECRETS, "PAYLOAD-SECRET"):
        assert secret.encode() not in response.content
    if header:
        assert header.encode() not in response.content
    assert not Artifact.objects.filter(store=store.model).exists()


def test_scope_header_absent_null_and_empty_fields_mean_absent(harness):
    store = harness.create_store()
    meta, _ = store.put(
        {"tenant": "", "principal": None, "conversationId": "c"}, kind="k", media_type="text/plain", data="x"
    )
    assert store.head({"conversationId": "c"}, meta["ref"]) is not None
    assert Artifact.objects.get(ref=meta["ref"]).scope_ns == "_/_/c"


def test_scope_value_with_a_nul_character_is_answered_not_a_server_error(harness):
    """A scope value is opaque data (§3.5.5); one holding U+0000 must get a normal answer or a 400
    ERR_INVALID_SCOPE that does not quote it — never an unhandled 500 from PostgreSQL text."""
    store = harness.create_store()
    scope = {"tenant": "TENANT-SECRET-81\u0000x", "principal": "p", "conversationId": "c"}
    answers = {verb: VERBS[verb](store, scope) for verb in VERBS}
    server_errors = {verb: r.status_code for verb, r in answers.items() if r.status_code >= 500}
    assert server_errors == {}
    for response in answers.values():
        if response.status_code == 400:
            assert response.json()["code"] == "ERR_INVALID_SCOPE"
            assert b"TENANT-SECRET-81" not in response.content


# --- nothing leaks into error bodies --------------------------------------------------------------
def test_error_bodies_never_carry_the_payload_tenant_or_principal(harness, kit, settings):
    tenant, principal, payload = "tenant-ZX81-payroll", "principal-QW77@example.com", "PAYLOAD-SALARY-BAND-7"
    s = {"tenant": tenant, "principal": principal, "conversationId": "conv-leak"}
    store = harness.create_store()
    kept, _ = store.put(s, kind="report/csv", media_type="text/csv", data=payload, digest="sha-256", label="quarterly")
    kit.corrupt(store, s, kept["ref"])
    store_now = kit.now(store)

    def put(**document: Any) -> Any:
        base = {"kind": "k", "mediaType": "text/plain", "payload": {"shape": "text", "value": payload}}
        return store.put_raw(s, {**base, **document})

    responses = {
        "unknown parent": put(parentRefs=[UNKNOWN, "not-a-ref"]),
        "blank kind": put(kind="  "),
        "blank mediaType": put(mediaType=""),
        "born expired": put(expiresAt=store_now - 1),
        "expiresAt not a number": put(expiresAt=payload),
        "digest md5": put(digest="md5"),
        "label not a string": put(label=[payload]),
        "origin not an object": put(origin=payload),
        "parentRefs not strings": put(parentRefs=[{"p": payload}]),
        "unknown field": put(extra=payload),
        "json not json": put(payload={"shape": "json", "value": "{" + payload}),
        "base64 not base64": put(payload={"shape": "binary", "value": payload + "!!"}),
        "unknown shape": put(payload={"shape": payload, "value": payload}),
        "value not a string": put(payload={"shape": "text", "value": [payload]}),
        "malformed body": store.post(API, s, '{"kind": "' + payload),
        "integrity": store.get_raw(s, kept["ref"]),
        "missing get": store.get_raw(s, UNKNOWN),
        "missing head": store.head_raw(s, UNKNOWN),
        "invalid wants": store.resolve_raw(s, "t", {"d": payload + " "}, {"d": UNKNOWN}, {"properties": {}}),
        "resolve refusal": store.resolve_raw(s, "t", {"d": "report/csv"}, {"d": UNKNOWN}),
        "resolve kind mismatch": store.resolve_raw(s, "t", {"d": "dataset/rows"}, {"d": kept["ref"]}),
        "resolve integrity": store.resolve_raw(s, "t", {"d": "report/csv"}, {"d": kept["ref"]}),
    }
    ArtifactStore.objects.filter(pk=store.model.pk).update(max_bytes_per_scope=8)
    responses["over budget"] = put()
    settings.FOOTPRINT_MAX_ARTIFACT_REQUEST_BYTES = 64
    responses["body too large"] = put()

    for name, response in responses.items():
        if name.startswith("resolve"):
            assert response.status_code == 200, name
            assert response.json()["ok"] is False, name
        else:
            assert response.status_code >= 400, (name, response.content)
            assert "code" in response.json(), name
        for secret in (payload, tenant, principal):
            assert secret.encode() not in response.content, (name, response.content)
    assert responses["body too large"].status_code == 413
    assert responses["body too large"].json()["code"] == "ERR_INVALID_ARTIFACT"
    assert responses["over budget"].status_code == 422
    assert responses["integrity"].status_code == 500


# --- list paging ----------------------------------------------------------------------------------
def _mint(
    store: StoreClient, scope: dict[str, Any], count: int, *, base: int = 1_700_000_000_000, kind: str = "k"
) -> list[str]:
    model = store_for_project(project=store.project)
    rows = [{"kind": kind, "body": b"x", "created_at": base + i} for i in range(count)]
    return [a.ref for a in orm_put_many(model, scope, rows)]


def test_list_limit_is_capped_at_200(harness, kit):
    store = harness.create_store()
    s = kit.scope("cap")
    refs = _mint(store, s, 205)
    assert store.capabilities()["maxListLimit"] == 200

    for asked in (200, 201, 1000, 10**9):
        first = store.list(s, limit=asked)
        assert len(first["artifacts"]) == 200, asked
        assert "cursor" in first
    second = store.list(s, limit=1000, cursor=first["cursor"])
    assert len(second["artifacts"]) == 5
    assert "cursor" not in second
    assert [m["ref"] for m in first["artifacts"] + second["artifacts"]] == list(reversed(refs))


def test_list_default_limit_is_50(harness, kit):
    store = harness.create_store()
    s = kit.scope("default")
    _mint(store, s, 60)
    page = store.list(s)
    assert len(page["artifacts"]) == 50
    assert "cursor" in page


@pytest.mark.parametrize("limit", [0, -3])
def test_list_limit_below_one_is_raised_to_one(harness, kit, limit):
    """§1.5: limit is rounded down with a minimum of 1 (so 0 asks for one row, not the default 50)."""
    store = harness.create_store()
    s = kit.scope("min")
    _mint(store, s, 3)
    page = store.list(s, limit=limit)
    assert len(page["artifacts"]) == 1
    assert "cursor" in page


@pytest.mark.parametrize(("limit", "rows"), [("2.5", 2), ("1.99", 1), ("0.5", 1)])
def test_list_fractional_limit_is_rounded_down(harness, kit, limit, rows):
    """§1.5: "rounded down, minimum 1"; a fractional limit is a page, not a refusal."""
    store = harness.create_store()
    s = kit.scope("fractional")
    _mint(store, s, 3)
    response = store.list_raw(s, limit=limit)
    assert response.status_code == 200, response.content
    assert len(response.json()["artifacts"]) == rows
    assert "cursor" in response.json()


@pytest.mark.parametrize("limit", ["nan", "inf", "ten"])
def test_list_limit_that_is_no_number_is_refused_naming_it(harness, kit, limit):
    store = harness.create_store()
    response = store.list_raw(kit.scope("not-a-number"), limit=limit)
    assert response.status_code == 422, response.content
    assert "limit" in response.content.decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "12",
        "k1.",
        "k1.!!!!",
        "k1." + b64url(b"not json"),
        "k1." + b64url(b"[1]"),
        "k1." + b64url(b'["1700000000000","art_aaaaaaaaaaaaaaaaaaaaaa"]'),
        "k1." + b64url(b'[1700000000000,"not-a-ref"]'),
        "k1." + b64url(b'{"createdAt":1,"ref":"x"}'),
    ],
)
def test_list_undecodable_cursor_restarts_from_the_newest(harness, kit, cursor):
    store = harness.create_store()
    s = kit.scope("restart")
    _mint(store, s, 5)
    assert store.list(s, limit=2, cursor=cursor) == store.list(s, limit=2)


def test_list_cursor_is_a_keyset_rows_minted_between_pages_do_not_shift_it(harness, kit):
    store = harness.create_store()
    s = kit.scope("keyset")
    original = _mint(store, s, 6)
    first = store.list(s, limit=2)
    _mint(store, s, 3, base=1_800_000_000_000)  # newer than everything listed so far
    rest: list[str] = []
    cursor = first["cursor"]
    while cursor:
        page = store.list(s, limit=2, cursor=cursor)
        rest.extend(m["ref"] for m in page["artifacts"])
        cursor = page.get("cursor")
    assert [m["ref"] for m in first["artifacts"]] + rest == list(reversed(original))


def test_list_cursor_carries_no_scope_replayed_elsewhere_it_lists_only_that_scope(harness, kit):
    store = harness.create_store()
    a, b = kit.scope("a"), kit.scope("b")
    _mint(store, a, 4, base=1_700_000_000_100)
    mine_b = _mint(store, b, 4, base=1_700_000_000_000)
    cursor = store.list(a, limit=1)["cursor"]
    page = store.list(b, limit=10, cursor=cursor)
    assert {m["ref"] for m in page["artifacts"]} <= set(mine_b)
    assert len(page["artifacts"]) == 4


# --- retention stated at mint (§4.2) -------------------------------------------------------------
def test_retention_max_ttl_is_stamped_on_every_mint(harness, kit):
    store = harness.create_store()
    s = kit.scope("max-ttl")
    meta, _ = store.put(s, kind="k", media_type="text/plain", data="x")
    assert meta["expiresAt"] == meta["createdAt"] + 30 * 86_400_000
    assert store.capabilities()["retention"] == {"maxTtlMs": 30 * 86_400_000}


def test_retention_ttl_tightens_a_callers_expiry_and_never_extends_it(harness, kit):
    store = harness.create_store()
    _set_budget(store, ttl_ms=10_000)
    s = kit.scope("ttl-dial")
    store_now = kit.now(store)
    absent, _ = store.put(s, kind="k", media_type="text/plain", data="x")
    assert absent["expiresAt"] == absent["createdAt"] + 10_000
    later, _ = store.put(s, kind="k", media_type="text/plain", data="x", expires_at=store_now + 10**9)
    assert later["expiresAt"] == later["createdAt"] + 10_000
    sooner, _ = store.put(s, kind="k", media_type="text/plain", data="x", expires_at=store_now + 5_000)
    assert sooner["expiresAt"] == store_now + 5_000
    fractional, _ = store.put(s, kind="k", media_type="text/plain", data="x", expires_at=store_now + 5_000.9)
    assert fractional["expiresAt"] == store_now + 5_000  # rounded down: a store may only make expiry earlier
    assert store.capabilities()["retention"] == {"ttlMs": 10_000, "maxTtlMs": 30 * 86_400_000}


# --- budgets (sequential) -------------------------------------------------------------------------
def _set_budget(store: StoreClient, **dials: Any) -> None:
    ArtifactStore.objects.filter(project__slug=store.project_slug).update(**dials)


def test_budget_count_evicts_oldest_first_with_reason_max_count(harness, kit):
    store = harness.create_store()
    _set_budget(store, max_count_per_scope=3)
    s = kit.scope("count")
    minted, swept = [], []
    for i in range(5):
        meta, gone = store.put(s, kind=f"k{i}", media_type="text/plain", data="x" * (i + 1))
        minted.append(meta)
        swept.append(gone)
        kit.advance(store, 10)

    assert swept[:3] == [[], [], []]
    assert swept[3] == [{"ref": minted[0]["ref"], "reason": "max-count", "kind": "k0", "bytes": 1}]
    assert swept[4] == [{"ref": minted[1]["ref"], "reason": "max-count", "kind": "k1", "bytes": 2}]
    assert [m["ref"] for m in store.list(s)["artifacts"]] == [minted[4]["ref"], minted[3]["ref"], minted[2]["ref"]]
    tombstones = Tombstone.objects.filter(store=store.model).order_by("ref")
    assert sorted((t.ref, t.reason, t.kind, t.bytes) for t in tombstones if t.reason != "deleted") == sorted(
        [(minted[0]["ref"], "max-count", "k0", 1), (minted[1]["ref"], "max-count", "k1", 2)]
    )
    assert capabilities_retention(store) == {"maxTtlMs": 30 * 86_400_000, "maxCountPerScope": 3}


def capabilities_retention(store: StoreClient) -> dict[str, Any]:
    return store.capabilities()["retention"]


def test_budget_bytes_evicts_oldest_first_until_it_fits_with_reason_max_bytes(kit):
    store = kit.bounded(100)
    s = kit.scope("bytes")
    a, _ = store.put(s, kind="a", media_type="text/plain", data="a" * 40)
    kit.advance(store, 10)
    b, _ = store.put(s, kind="b", media_type="text/plain", data="b" * 40)
    kit.advance(store, 10)
    c, swept_c = store.put(s, kind="c", media_type="text/plain", data="c" * 40)
    assert swept_c == [{"ref": a["ref"], "reason": "max-bytes", "kind": "a", "bytes": 40}]
    kit.advance(store, 10)
    d, swept_d = store.put(s, kind="d", media_type="text/plain", data="d" * 90)
    assert swept_d == [
        {"ref": b["ref"], "reason": "max-bytes", "kind": "b", "bytes": 40},
        {"ref": c["ref"], "reason": "max-bytes", "kind": "c", "bytes": 40},
    ]
    assert [m["ref"] for m in store.list(s)["artifacts"]] == [d["ref"]]
    other = kit.scope("other")  # budgets are per scope
    _, swept_other = store.put(other, kind="e", media_type="text/plain", data="e" * 90)
    assert swept_other == []


def test_budget_oversize_refusal_applies_nothing_not_even_ttl_sweeps(kit):
    store = kit.bounded(64)
    s = kit.scope("oversize")
    brief, _ = store.put(s, kind="brief", media_type="text/plain", data="b", expires_at=kit.now(store) + 1_000)
    keeper, _ = store.put(s, kind="keeper", media_type="text/plain", data="k" * 60)
    kit.advance(store, 1_001)

    with pytest.raises(StoreRefused) as caught:
        store.put(s, kind="big", media_type="text/plain", data="x" * 65)
    assert caught.value.code == "ERR_INVALID_ARTIFACT"
    assert caught.value.error == (
        "[artifacts] put refused: the payload is 65 bytes and this store's byte budget per scope is 64. Evicting "
        "everything else would not make it fit, so it is refused instead of admitted by force. Store something "
        "smaller, or build the store with a larger maxBytesPerScope."
    )
    assert Artifact.objects.filter(ref=brief["ref"]).exists()  # the expired row was not swept either
    assert Artifact.objects.filter(ref=keeper["ref"]).exists()
    assert not Tombstone.objects.filter(ref__in=[brief["ref"], keeper["ref"]]).exists()


def test_budget_put_reports_expired_rows_of_the_scope_as_ttl_sweeps(harness, kit):
    store = harness.create_store()
    s = kit.scope("ttl")
    brief, _ = store.put(
        s, kind="scratch/preview", media_type="text/plain", data="preview", expires_at=kit.now(store) + 1_000
    )
    elsewhere, _ = store.put(
        kit.scope("elsewhere"), kind="x", media_type="text/plain", data="x", expires_at=kit.now(store) + 1_000
    )
    kit.advance(store, 5_000)

    _, swept = store.put(s, kind="scratch/preview", media_type="text/plain", data="second preview")

    assert swept == [{"ref": brief["ref"], "reason": "ttl", "kind": "scratch/preview", "bytes": 7}]
    tombstone = Tombstone.objects.get(ref=brief["ref"])
    assert (tombstone.reason, tombstone.expired_at, tombstone.bytes) == ("ttl", brief["expiresAt"], 7)
    assert Artifact.objects.filter(ref=elsewhere["ref"]).exists()  # another scope's rows are not its business


def test_budget_held_artifacts_are_never_evicted(harness, kit, django_user_model):
    store = harness.create_store()
    _set_budget(store, max_count_per_scope=2)
    s = kit.scope("held")
    held, _ = store.put(s, kind="evidence", media_type="text/plain", data="keep me")
    kit.advance(store, 10)
    second, _ = store.put(s, kind="scratch", media_type="text/plain", data="s")
    auditor = django_user_model.objects.create_user(username="auditor-held", password="pw")
    artifact_hold_place(store=store.model, ref=held["ref"], user=auditor, reason="legal hold")
    kit.advance(store, 10)

    _, swept = store.put(s, kind="scratch", media_type="text/plain", data="t")

    assert swept == [{"ref": second["ref"], "reason": "max-count", "kind": "scratch", "bytes": 1}]
    record = store.get(s, held["ref"])
    assert record is not None
    assert record.data == "keep me"


# --- budgets under concurrency (real commits, several connections) ---------------------------------
def _hammer(
    store: StoreClient, scope: dict[str, Any], threads: int, puts: int, size: int
) -> tuple[list[Any], list[BaseException]]:
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads, timeout=30)

    def worker(n: int) -> None:
        client = store.clone()
        try:
            barrier.wait()
            for i in range(puts):
                data = f"t{n}-p{i}-".ljust(size, ".")
                results.append(client.put(scope, kind=f"chunk-{n}", media_type="text/plain", data=data))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=120)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_budget_concurrent_puts_never_exceed_the_byte_budget(kit):
    store = kit.bounded(200)
    s = kit.scope("race-bytes")

    results, errors = _hammer(store, s, threads=8, puts=5, size=40)

    assert errors == []
    assert len(results) == 40
    live = store.list_all(s)
    assert sum(m["bytes"] for m in live) <= 200
    assert len(live) == 5
    rows = Artifact.objects.filter(store=store.model)
    assert sum(a.bytes for a in rows) <= 200
    assert rows.count() == 5

    minted = {meta["ref"] for meta, _ in results}
    swept = [entry for _, gone in results for entry in gone]
    swept_refs = [entry["ref"] for entry in swept]
    assert all(entry["reason"] == "max-bytes" and entry["bytes"] == 40 for entry in swept)
    assert len(swept_refs) == len(set(swept_refs)) == 35  # each eviction reported exactly once
    assert set(swept_refs) | {m["ref"] for m in live} == minted
    assert not set(swept_refs) & {m["ref"] for m in live}
    tombstones = list(Tombstone.objects.filter(store=store.model).exclude(scope_ns__endswith="-clock-probe"))
    assert sorted(t.ref for t in tombstones) == sorted(swept_refs)
    assert {t.reason for t in tombstones} == {"max-bytes"}


@pytest.mark.django_db(transaction=True)
def test_budget_concurrent_puts_never_exceed_the_count_budget(harness, kit):
    store = harness.create_store()
    _set_budget(store, max_count_per_scope=4)
    s = kit.scope("race-count")

    results, errors = _hammer(store, s, threads=8, puts=5, size=10)

    assert errors == []
    live = store.list_all(s)
    assert len(live) == 4
    swept = [entry for _, gone in results for entry in gone]
    assert len(swept) == len({e["ref"] for e in swept}) == 36
    assert {e["reason"] for e in swept} == {"max-count"}
    assert Tombstone.objects.filter(store=store.model, reason="max-count").count() == 36
