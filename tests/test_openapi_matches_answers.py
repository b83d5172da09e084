"""The OpenAPI document is what the server answers.

Each JSON operation except event ingestion (whose hand parser is measured) is called for real,
through the test client on real PostgreSQL, and its answer is validated against the response
schema the document gives for that status. The document's objects are read strictly here (a key
the schema does not name fails, unless the schema allows more), so an answer cannot carry what
the document leaves out; and no 2xx answer may be documented as an untyped object.
"""

import base64
import copy
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jsonschema_rs
import orjson
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from footprint_site.api import api
from ledger.models import Ask, StandingApproval
from ledger.schemas import AskIn
from tenancy.models import Membership, Project
from tenancy.services import Actor, agent_key_create
from tests.conftest import DATA, ApiClient, load_fixture, person
from tests.ledger.ask_helpers import b_body, plain_body

PREFIX = "/api/v1"
HOT_PATH = {("post", "/events")}  # POST /events: the ingestion hot path, parsed by hand
AF_SCOPE = base64.urlsafe_b64encode(orjson.dumps({"conversationId": "openapi"})).decode().rstrip("=")
JSON_OBJECT_KINDS = ("properties", "additionalProperties", "$ref", "allOf", "anyOf", "oneOf")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return api.get_openapi_schema()


def strict(schema: Any) -> Any:
    """The schema with every object that names its properties closed to keys it does not name."""
    if isinstance(schema, dict):
        out = {key: strict(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


def cold_operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, operations in document["paths"].items():
        route = path.removeprefix(PREFIX)
        if route.startswith("/testing/"):  # test hooks, off in production
            continue
        for method, operation in operations.items():
            if (method, route) not in HOT_PATH:
                yield method, route, operation


class Recorder:
    """Calls operations by their documented route and keeps each answer for validation."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self.answers: list[tuple[str, str, int, Any]] = []

    def call(self, method: str, route: str, *, body: Any = None, status: int, **values: Any) -> Any:
        path = PREFIX + route.format(**values)
        headers = {"AF-Scope": AF_SCOPE}
        if method == "get":
            response = self.client.get(path, headers=headers)
        elif method == "delete":
            response = self.client.delete(path, headers=headers)
        elif method == "put":
            response = self.client.put(path, orjson.dumps(body), content_type="application/json", headers=headers)
        else:
            raw = body if isinstance(body, bytes) else orjson.dumps(body)
            response = self.client.post(path, raw, content_type="application/json", headers=headers)
        assert response.status_code == status, (method, path, response.content)
        answer = response.json() if response.content else None
        self.answers.append((method, route, status, answer))
        return answer


def _standing_approval_of(ask_id: int) -> None:
    ask = Ask.objects.get(pk=ask_id)
    granted_by = User.objects.create_user(username="grantor")
    StandingApproval.objects.create(
        project=ask.project,
        tool_name=ask.tool_name or "t",
        pattern={"account": "ACC-900", "amount": {"max": 10}},
        agent_id="agent-1",
        source_ask=ask,
        granted_by=granted_by,
        granted_by_label="grantor",
        note="for the afternoon",
        expires_at=timezone.now() + timedelta(minutes=5),
    )


def _admin_answers(project: Project, django_user_model: Any) -> list[tuple[str, str, int, Any]]:
    """Who is told and who decides, by a key acting for the project's admin."""
    ada = person(django_user_model, "ada", project, Membership.Role.ADMIN)
    person(django_user_model, "ann", project, Membership.Role.APPROVER)
    admin = Recorder(ApiClient(agent_key_create(project=project, scopes=["admin"], actor=Actor.of_user(ada))[1]))
    call = admin.call
    channel = {"kind": "email", "target": "oncall@example.com"}
    call("put", "/admin/notification-channels/{name}", body=channel, status=200, name="on-call")
    call(
        "put", "/admin/notification-channels/{name}", body={"kind": "slack", "target": "http://x"}, status=422, name="x"
    )
    call("get", "/admin/notification-channels", status=200)
    steps = [{"afterMinutes": 5, "notify": "on-call"}]
    rule = {"toolName": "transfer_funds", "deadlineMinutes": 30, "escalation": steps}
    deadline = call("post", "/admin/deadline-rules", body=rule, status=200)
    call("get", "/admin/deadline-rules", status=200)
    call("delete", "/admin/deadline-rules/{rule_id}", status=204, rule_id=deadline["id"])
    call("delete", "/admin/deadline-rules/{rule_id}", status=404, rule_id=deadline["id"])
    group = call("post", "/admin/approver-groups", body={"name": "treasury"}, status=201)
    members = {"group_id": group["id"]}
    ann = call("post", "/admin/approver-groups/{group_id}/members", body={"username": "ann"}, status=200, **members)
    call("get", "/admin/approver-groups", status=200)
    approval = {"toolName": "transfer_funds", "group": "treasury", "quorum": 1, "conditions": "amount > 1000"}
    created = call("post", "/admin/approval-rules", body=approval, status=201)
    call("get", "/admin/approval-rules", status=200)
    call("delete", "/admin/approval-rules/{rule_id}", status=204, rule_id=created["id"])
    user_id = ann["members"][0]["id"]
    call("delete", "/admin/approver-groups/{group_id}/members/{user_id}", status=200, user_id=user_id, **members)
    call("delete", "/admin/notification-channels/{name}", status=204, name="on-call")
    nobody = Recorder(ApiClient(agent_key_create(project=project, scopes=["admin"])[1]))
    nobody.call("get", "/admin/approval-rules", status=403)
    return admin.answers + nobody.answers


@pytest.fixture
def answers(
    agent_client: ApiClient, integration_client: ApiClient, project: Project, django_user_model: Any
) -> list[tuple[str, str, int, Any]]:
    agent = Recorder(agent_client)
    call = agent.call

    recording = load_fixture("a-run-recording/recording-envelope.json")
    run_id = call("post", "/recordings", body=recording, status=201)["run"]["runId"]
    call("post", "/recordings", body=recording, status=200)
    call("get", "/runs", status=200)
    call("get", "/runs/{run_id}", status=200, run_id=run_id)
    call("get", "/runs/{run_id}", status=404, run_id="no-such-run")
    call("get", "/runs/{run_id}/events", status=200, run_id=run_id)
    call("get", "/runs/{run_id}/verify", status=200, run_id=run_id)
    call("get", "/runs/{run_id}/audit-bundle", status=200, run_id=run_id)
    bundle = (DATA / "f-audit/bundle.json").read_bytes()
    call("post", "/audit-bundles", body=bundle, status=201)
    broken = orjson.loads(bundle)
    broken["records"][3]["payload"] = "tampered"
    call("post", "/audit-bundles", body=broken, status=201)
    receipt = {"runId": run_id, "records": 1, "head": "00" * 32, "signature": "not ours"}
    call("post", "/receipts/verify", body={"receipts": [receipt]}, status=200)
    call("post", "/receipts/verify", body={"receipts": [receipt] * 1001}, status=413)

    ask = call("post", "/asks", body=b_body(), status=201)["ask"]
    call("post", "/asks", body=b_body(), status=200)
    plain = call("post", "/asks", body=plain_body(), status=201)["ask"]
    call("get", "/asks", status=200)
    call("get", "/asks/{ask_id}", status=200, ask_id=ask["id"])
    call("get", "/asks/{ask_id}/decision", status=200, ask_id=ask["id"])
    integration = Recorder(integration_client)
    integration.call(
        "post", "/asks/{ask_id}/decision", body={"by": "ops", "approved": True}, status=200, ask_id=ask["id"]
    )
    decision = {"by": "ops", "value": "eu"}
    integration.call("post", "/asks/{ask_id}/decision", body=decision, status=200, ask_id=plain["id"])
    call("get", "/asks/{ask_id}/decision", status=200, ask_id=ask["id"])
    call("post", "/asks", body={**b_body(), "evil": 1}, status=422)
    _standing_approval_of(ask["id"])
    call("get", "/standing-approvals", status=200)

    put = {"kind": "report/csv", "mediaType": "text/csv", "payload": {"shape": "text", "value": "a,b\n1,2\n"}}
    ref = call("post", "/artifacts", body=put, status=201)["meta"]["ref"]
    labelled = copy.deepcopy(put) | {"label": "q3", "origin": {"runId": run_id}, "parentRefs": [ref]}
    call("post", "/artifacts", body=labelled, status=201)
    call("get", "/capabilities", status=200)
    call("get", "/artifacts", status=200)
    call("get", "/artifacts/{ref}/meta", status=200, ref=ref)
    call("get", "/artifacts/{ref}", status=200, ref=ref)
    resolve = {"toolName": "t", "wants": {"d": "report/csv"}, "args": {"d": ref}}
    call("post", "/wants:resolve", body=resolve, status=200)
    call("post", "/wants:resolve", body=resolve | {"wants": {"d": "dataset/rows"}}, status=200)
    call("delete", "/artifacts/{ref}", status=204, ref=ref)
    call("get", "/artifacts/{ref}", status=404, ref=ref)
    return agent.answers + integration.answers + _admin_answers(project, django_user_model)


def test_every_answer_is_valid_against_its_documented_schema(document, answers):
    operations = {(method, route): operation for method, route, operation in cold_operations(document)}
    components = strict(document["components"])
    for method, route, status, answer in answers:
        documented = operations[(method, route)]["responses"][status]
        content = documented.get("content")
        if answer is None:
            assert content is None, f"{method} {route} {status}: documented with a body it does not send"
            continue
        schema = {**strict(content["application/json"]["schema"]), "components": components}
        errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.validator_for(schema).iter_errors(answer)]
        assert not errors, f"{method.upper()} {route} {status}: {errors}"


def test_every_cold_operation_is_called(document, answers):
    called = {(method, route) for method, route, _, _ in answers}
    assert called == {(method, route) for method, route, _ in cold_operations(document)}


def test_no_2xx_answer_is_documented_as_an_untyped_object(document):
    schemas = document["components"]["schemas"]
    for method, route, operation in cold_operations(document):
        for status, response in operation["responses"].items():
            if not 200 <= int(status) < 300 or "content" not in response:
                continue
            schema = response["content"]["application/json"]["schema"]
            if "$ref" in schema:
                schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
            assert schema.get("properties"), f"{method.upper()} {route} {status} is documented as {schema}"


def test_the_documented_ask_body_names_the_fields_the_server_takes(document):
    body = document["paths"][f"{PREFIX}/asks"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == set(AskIn.model_fields)
    assert body["additionalProperties"] is False
