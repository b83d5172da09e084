"""The world the isolation matrix (tests/test_isolation_matrix.py) runs in, and its probes.

Two projects hold the same kind of real data, put there through the API and the pages: scenario b
of the framework's fixtures (the run paused at the four-eyes ask, with its middleware refusal), the
ask it paused on, the run's ledger exported and imported back as an audit bundle, an artifact in
the same AF-Scope, and members. Only globex's copy carries MARK, and globex's runs have ids of
their own, so a response that holds MARK, or a globex identifier the caller did not send, shows
globex's data to someone it does not belong to. globex also holds a hold on its artifact.
"""

from __future__ import annotations

import copy
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

import orjson
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from django.utils import timezone

from artifacts.models import ArtifactHold, ArtifactStore
from artifacts.scopes import scope_header
from ledger.explorer import span_index
from ledger.models import (
    ApprovalRule,
    ApproverGroup,
    Ask,
    AuditBundle,
    DeadlineRule,
    NotificationChannel,
    Refusal,
    RunHold,
    RunTombstone,
    StandingApproval,
    StandingApprovalLimits,
)
from tenancy.models import AgentKey, Membership, Project
from tenancy.services import Actor, agent_key_create
from tests.conftest import load_fixture, numbered_per_run, person

# One alphanumeric token (so HTML and JSON escaping leave it whole) that only globex's data holds.
MARK = "globexsecret7c1e"
# Scenario b's strings that globex's copy replaces with marked ones: the invoice in the user's
# prompt, the frozen account the middleware refuses, and the account the four-eyes ask is about.
MARKED = {"INV-1": f"{MARK}invoice", "FROZEN-777": f"{MARK}frozen", "ACC-900": f"{MARK}account"}
B_RUN = "run-1796043009968-3"
B_RESUMED_RUN = "run-1796043010363-4"
GLOBEX_RUN = "run-globex-b3"
GLOBEX_RESUMED_RUN = "run-globex-b4"
# Both projects keep their artifact under the same AF-Scope: only the key's project separates them.
SCOPE = {"tenant": "tenant-shared", "principal": "principal-shared", "conversationId": "conv-shared"}
SCOPE_HEADERS = {"AF-Scope": scope_header(SCOPE)}
# globex's store dials carry a number no default has, so capabilities can be told apart.
GLOBEX_COUNT_BUDGET = 7331337
LOGIN = "/accounts/login/"
# A well-formed key that no project holds.
BOGUS_KEY = "afk_" + "x" * 8 + "_" + "y" * 32


@dataclass(frozen=True)
class Target:
    """What a route addresses, as a caller writes it in a URL or a form."""

    project: str
    run_id: str
    ask_id: int
    ref: str
    hold_id: int
    run_hold_id: int
    refusal_id: int
    bundle_id: int
    project_pk: int
    group_id: int
    member_id: int
    rule_id: int
    standing_id: int
    deadline_rule_id: int

    @property
    def channel(self) -> str:
        """The name of the project's notification channel (names are unique within a project only)."""
        return f"ch-{self.project}"

    def identifiers(self) -> dict[str, str]:
        return {
            "project": self.project,
            "run_id": self.run_id,
            "ref": self.ref,
            "ask_id": str(self.ask_id),
            "hold_id": str(self.hold_id),
            "run_hold_id": str(self.run_hold_id),
            "refusal_id": str(self.refusal_id),
            "bundle_id": str(self.bundle_id),
            "project_pk": str(self.project_pk),
            "group_id": str(self.group_id),
            "member_id": str(self.member_id),
            "rule_id": str(self.rule_id),
            "standing_id": str(self.standing_id),
            "deadline_rule_id": str(self.deadline_rule_id),
        }


@dataclass(frozen=True)
class Caller:
    """Who asks: an agent key (`Authorization: Bearer`), a signed-in session's cookie, or neither."""

    key: str | None = None
    session: str | None = None


ANONYMOUS = Caller()


@dataclass
class World:
    acme: Project
    globex: Project
    acme_target: Target
    globex_target: Target
    unknown: Target  # ids no object has
    callers: dict[str, Caller]  # see build_world
    acme_run_ids: set[str] = field(default_factory=set)
    acme_open_asks: int = 0

    def globex_identifiers(self) -> list[str]:
        """Identifiers of globex's objects that appear in nothing of acme's."""
        return [MARK, GLOBEX_RUN, GLOBEX_RESUMED_RUN, self.globex_target.ref]


# --- requests -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """Everything the caller sent, to tell echoed identifiers from leaked ones."""
        return f"{self.path}?{urlencode(self.query)} {self.body.decode(errors='replace')}"


def json_call(method: str, path: str, document: Any = None, **kwargs: Any) -> Call:
    body = b"" if document is None else document if isinstance(document, bytes) else orjson.dumps(document)
    return Call(method, path, body=body, **kwargs)


def form_call(method: str, path: str, data: dict[str, Any] | None = None) -> Call:
    """A form post; a bytes value is sent as a file, in multipart/form-data."""
    data = data or {}
    if any(isinstance(v, bytes) for v in data.values()):
        parts = {k: SimpleUploadedFile(f"{k}.json", v) if isinstance(v, bytes) else v for k, v in data.items()}
        return Call(method, path, body=encode_multipart(BOUNDARY, parts), content_type=MULTIPART_CONTENT)
    return Call(method, path, body=urlencode(data).encode(), content_type="application/x-www-form-urlencoded")


# One client for every caller: each new Client loads the middleware again on its first request
# (WhiteNoise scans the static files), which would cost more than the probes themselves. Its
# cookie jar is reset to the caller's session before each request. Server errors come back as
# 500 answers (reported with the rest) rather than as exceptions.
_http = Client(raise_request_exception=False)
_http_checking_csrf = Client(raise_request_exception=False, enforce_csrf_checks=True)


def send(caller: Caller, call: Call, *, check_csrf: bool = False) -> HttpResponse:
    """The call as `caller` makes it. The test client skips Django's CSRF check unless
    `check_csrf`, as a browser's cross-site post (cookie sent, token missing) would meet it."""
    http = _http_checking_csrf if check_csrf else _http
    http.cookies = SimpleCookie()
    if caller.session:
        http.cookies[settings.SESSION_COOKIE_NAME] = caller.session
    headers = {**call.headers, **({"Authorization": f"Bearer {caller.key}"} if caller.key else {})}
    return http.generic(
        call.method, call.path, call.body, content_type=call.content_type, headers=headers, query_params=call.query
    )


def signed_in(user: Any) -> Caller:
    client = Client()
    client.force_login(user)
    return Caller(session=client.cookies[settings.SESSION_COOKIE_NAME].value)


CSRF_VALUE = re.compile(r'("x-csrftoken": "|name="csrfmiddlewaretoken" value=")[^"]*')


def normalized(response: HttpResponse, target: Target) -> tuple[int, str, str]:
    """Status, content type and body with the addressed identifiers (and CSRF tokens) blanked:
    two answers that differ only there tell a caller nothing about which objects exist. API
    sentences may echo the id asked for; HTML pages must not echo numeric ids at all (blanking
    a short number in a page would blank unrelated text)."""
    body = response.content.decode(errors="replace")
    is_json = response.get("Content-Type", "").startswith("application/json")
    for name, value in target.identifiers().items():
        if is_json or not value.isdigit():
            body = re.sub(rf"(?<![0-9A-Za-z_-]){re.escape(value)}(?![0-9A-Za-z_-])", "{" + name + "}", body)
    return response.status_code, response.get("Content-Type", ""), CSRF_VALUE.sub(r"\1…", body)


BADGE = re.compile(r'<span id="inbox-count" class="badge"[^>]*>\s*(\d*)\s*</span>')


def leaked(response: HttpResponse, world: World, call: Call) -> list[str]:
    """globex's marker, and globex identifiers the caller did not send itself, found in the body."""
    body = response.content.decode(errors="replace")
    sent = call.text()
    return [s for s in world.globex_identifiers() if s in body and (s == MARK or s not in sent)]


def outsiders_badge(response: HttpResponse, world: World) -> str | None:
    """The inbox badge every page shows acme's admin must count acme's open asks, not globex's too."""
    found = BADGE.search(response.content.decode(errors="replace"))
    if found is None or found.group(1) == str(world.acme_open_asks):
        return None
    return f"the inbox badge counts {found.group(1)} open asks; acme has {world.acme_open_asks}"


# --- what the database holds -----------------------------------------------------------------------


def writes() -> dict[str, int]:
    """Rows inserted, updated or deleted so far in this transaction, per table (PostgreSQL's own
    counters), sessions aside: a signed-in caller's own session is not the project's data."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables"
            " WHERE relname <> 'django_session'"
        )
        return {table: n for table, n in cursor.fetchall() if n}


def written(before: dict[str, int], after: dict[str, int]) -> list[str]:
    return sorted(f"{t} (+{after[t] - before.get(t, 0)} rows)" for t in after if after[t] != before.get(t, 0))


def _path_to_project(model: Any) -> str | None:
    """The ORM lookup from `model` to its Project through foreign keys (shortest), or None."""
    if model is Project:
        return "pk"
    queue: deque[tuple[Any, str, int]] = deque([(model, "", 0)])
    while queue:
        current, prefix, depth = queue.popleft()
        for f in current._meta.concrete_fields:
            if not f.is_relation or f.related_model in (None, get_user_model()) or depth == 3:
                continue
            if f.related_model is Project:
                return f"{prefix}{f.name}"
            queue.append((f.related_model, f"{prefix}{f.name}__", depth + 1))
    return None


def snapshot(project: Project) -> dict[str, tuple[int, str]]:
    """Row count and an MD5 of every row that belongs to `project` in every ledger and artifacts
    table, payload bytes included: equal snapshots mean none of its rows changed."""
    state: dict[str, tuple[int, str]] = {}
    models = [*apps.get_app_config("ledger").get_models(), *apps.get_app_config("artifacts").get_models()]
    with connection.cursor() as cursor:
        for model in models:
            path = _path_to_project(model)
            if path is None:
                continue
            sql, params = model._default_manager.filter(**{path: project.pk}).values("pk").query.sql_with_params()
            table = connection.ops.quote_name(model._meta.db_table)
            # A row value: a composite primary key (a run's events) has several columns.
            pk = ", ".join(f"t.{connection.ops.quote_name(field.column)}" for field in model._meta.pk_fields)
            cursor.execute(
                f"SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY {pk})), '')"  # noqa: S608
                f" FROM {table} t WHERE ({pk}) IN ({sql})",
                params,
            )
            state[model._meta.db_table] = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), coalesce(md5(string_agg(md5(p.body), ',' ORDER BY p.artifact_id)), '')"
            " FROM artifacts_payload p JOIN artifacts_artifact a ON a.id = p.artifact_id"
            " JOIN artifacts_artifactstore s ON s.id = a.store_id WHERE s.project_id = %s",
            [project.pk],
        )
        state["artifacts_payload"] = cursor.fetchone()
    return state


def changed(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(f"{t} ({before[t][0]} → {after[t][0]} rows)" for t in before if before[t] != after.get(t))


# --- building the world -----------------------------------------------------------------------------


def _marked(document: Any) -> Any:
    text = orjson.dumps(document).decode()
    for plain, marked in MARKED.items():
        text = text.replace(plain, marked)
    text = text.replace(B_RUN, GLOBEX_RUN).replace(B_RESUMED_RUN, GLOBEX_RESUMED_RUN)
    return orjson.loads(text)


def b_events_until_pause() -> list[dict[str, Any]]:
    raw = load_fixture("b-middleware/events-declined.json")
    return numbered_per_run(raw["events"])[: raw["resumeStartsAtSeq"]]


def b_outcome() -> dict[str, Any]:
    """The paused outcome as an agent posts it (the fixture's "checkpoint" is a placeholder)."""
    outcome = copy.deepcopy(load_fixture("b-middleware/ask-pause.json")["pauseOutcome"])
    del outcome["checkpoint"]
    return outcome


def b_checkpoint() -> dict[str, Any]:
    return load_fixture("b-middleware/ask-checkpoint.json")


def _ok(response: HttpResponse, *statuses: int) -> Any:
    assert response.status_code in statuses, (response.status_code, response.content[:500])
    return response.json() if response.get("Content-Type", "").startswith("application/json") else None


def _project_data(
    agent: Caller, *, events: list[dict[str, Any]], outcome: dict[str, Any], run_id: str, label: str, text: str
) -> tuple[int, str]:
    """Through the API: ingest the run, post its paused outcome (the ask), export the run's ledger
    and import it back as an audit bundle, mint an artifact. Returns (ask id, ref)."""
    _ok(send(agent, json_call("POST", "/api/v1/events", {"events": events})), 200)
    ask = _ok(send(agent, json_call("POST", "/api/v1/asks", {**outcome, "runId": run_id})), 200, 201)["ask"]
    exported = send(agent, Call("GET", f"/api/v1/runs/{run_id}/audit-bundle"))
    _ok(exported, 200)
    _ok(send(agent, json_call("POST", "/api/v1/audit-bundles", exported.content)), 201)
    put = {
        "kind": "dataset/rows",
        "mediaType": "text/plain",
        "label": label,
        "digest": "sha-256",
        "payload": {"shape": "text", "value": text},
    }
    meta = _ok(send(agent, json_call("POST", "/api/v1/artifacts", put, headers=SCOPE_HEADERS)), 201)["meta"]
    return ask["id"], meta["ref"]


def _target(project: Project, run_id: str, ask_id: int, ref: str) -> Target:
    holds = ArtifactHold.objects.filter(store__project=project).values_list("pk", flat=True)
    return Target(
        project=project.slug,
        run_id=run_id,
        ask_id=ask_id,
        ref=ref,
        hold_id=holds[0] if holds else 0,
        run_hold_id=RunHold.objects.filter(project=project).values_list("pk", flat=True).first() or 0,
        refusal_id=Refusal.objects.filter(run__project=project).order_by("pk").values_list("pk", flat=True)[0],
        bundle_id=AuditBundle.objects.filter(project=project).values_list("pk", flat=True).get(),
        project_pk=project.pk,
        group_id=ApproverGroup.objects.filter(project=project).values_list("pk", flat=True).get(),
        member_id=ApproverGroup.members.through.objects.filter(approvergroup__project=project)
        .values_list("user_id", flat=True)
        .get(),
        rule_id=ApprovalRule.objects.filter(project=project).values_list("pk", flat=True).get(),
        standing_id=StandingApproval.objects.filter(project=project).values_list("pk", flat=True).get(),
        deadline_rule_id=DeadlineRule.objects.filter(project=project).values_list("pk", flat=True).get(),
    )


def _admin_key(project: Project, admin: Any) -> str:
    return agent_key_create(project=project, scopes=[AgentKey.Scope.ADMIN], actor=Actor.of_user(admin))[1]


def build_world(acme: Project, globex: Project, acme_key: str, globex_key: str) -> World:
    """Callers: "anonymous", "bogus key", "acme" and "globex" (keys with every scope; globex's
    posted its ask's checkpoint), "globex revoked" (every scope, revoked before any use, so no
    cache knows it), "globex integration" (scope decide only), "globex without <scope>" for each
    scope, and signed-in sessions: "outsider" (admin of acme only) and globex's "auditor",
    "approver" and "admin"."""
    user = get_user_model()
    people = {
        "outsider": person(user, "acme-admin", acme, Membership.Role.ADMIN),
        **{role: person(user, f"globex-{role}", globex, role) for role in Membership.Role.values},
    }
    every_scope = list(AgentKey.Scope.values)
    revoked, revoked_secret = agent_key_create(project=globex, scopes=every_scope)
    AgentKey.objects.filter(pk=revoked.pk).update(revoked_at="2026-01-01T00:00:00Z")
    callers = {
        "anonymous": ANONYMOUS,
        "bogus key": Caller(key=BOGUS_KEY),
        "acme": Caller(key=acme_key),
        "globex": Caller(key=globex_key),
        "globex revoked": Caller(key=revoked_secret),
        "globex integration": Caller(key=agent_key_create(project=globex, scopes=[AgentKey.Scope.DECIDE])[1]),
        **{
            f"globex without {scope}": Caller(
                key=agent_key_create(project=globex, scopes=[s for s in every_scope if s != scope])[1]
            )
            for scope in every_scope
        },
        "globex without asks or decide": Caller(
            key=agent_key_create(project=globex, scopes=[s for s in every_scope if s not in ("asks", "decide")])[1]
        ),
        **{who: signed_in(u) for who, u in people.items()},
        # Admin keys, each acting for its project's admin (their key_minted change names them).
        "acme admin key": Caller(key=_admin_key(acme, people["outsider"])),
        "globex admin key": Caller(key=_admin_key(globex, people["admin"])),
    }

    acme_ask, acme_ref = _project_data(
        callers["acme"],
        events=b_events_until_pause(),
        outcome={**b_outcome(), "checkpoint": b_checkpoint()},
        run_id=B_RUN,
        label="acme rows",
        text="acme payload",
    )
    outcome = _marked(b_outcome())
    outcome["checkpoint"] = _marked(b_checkpoint())
    outcome["checkpoint"]["privateNote"] = f"{MARK}checkpoint"
    globex_ask, globex_ref = _project_data(
        callers["globex"],
        events=_marked(b_events_until_pause()),
        outcome=outcome,
        run_id=GLOBEX_RUN,
        label=f"{MARK}label",
        text=f"{MARK}payload",
    )
    ArtifactStore.objects.filter(project=globex).update(max_count_per_scope=GLOBEX_COUNT_BUDGET)
    hold = form_call("POST", f"/projects/{globex.slug}/artifacts/{globex_ref}/hold/", {"reason": f"{MARK}hold"})
    _ok(send(callers["auditor"], hold), 302)
    for project, run_id, holder, reason in (
        (acme, B_RUN, "outsider", "acme run hold"),
        (globex, GLOBEX_RUN, "auditor", f"{MARK}run hold"),
    ):
        run_hold = form_call("POST", f"/projects/{project.slug}/runs/{run_id}/holds/", {"reason": reason})
        _ok(send(callers[holder], run_hold), 302)
        # As retention leaves it when it removes a run (the run itself stays: the pages address both).
        RunTombstone.objects.create(
            project=project,
            run_id=run_id,
            chain_length=1,
            head_hash=bytes(32),
            keep_days=30,
            archive_location=f"file:///nowhere/{project.slug}.audit.json",
            archive_sha256="0" * 64,
            archive_bytes=1,
        )

    for project, ask_id, grantor, account, group_name in (
        (acme, acme_ask, "outsider", "ACC-900", "treasury"),
        (globex, globex_ask, "approver", f"{MARK}account", f"{MARK}treasury"),
    ):
        # Who decides: a group with one member, a rule for a tool the runs never call (so the ask
        # itself stays any approver's to decide), standing approvals allowed, and one in force.
        group = ApproverGroup.objects.create(project=project, name=group_name)
        group.members.add(people[grantor])
        ApprovalRule.objects.create(project=project, tool_name="transfer", group=group, quorum=1)
        StandingApprovalLimits.objects.create(project=project, max_minutes=60, allow_any_agent=True)
        # Who is told: a channel, and a deadline rule for that same tool no run calls.
        NotificationChannel.objects.create(
            project=project, name=f"ch-{project.slug}", kind="email", target=f"{group_name}@example.com", secret="s"
        )
        DeadlineRule.objects.create(project=project, tool_name="transfer", deadline_minutes=30)
        StandingApproval.objects.create(
            project=project,
            tool_name="transfer",
            pattern={"account": account},
            source_ask_id=ask_id,
            granted_by=people[grantor],
            granted_by_label=people[grantor].get_username(),
            expires_at=timezone.now() + timedelta(days=1),
        )

    # As the worker leaves the waterfall's index within seconds: reading a run page then writes nothing.
    span_index.run_spans_index_pending()

    far = 1_000_000_000
    return World(
        acme=acme,
        globex=globex,
        acme_target=_target(acme, B_RUN, acme_ask, acme_ref),
        globex_target=_target(globex, GLOBEX_RUN, globex_ask, globex_ref),
        unknown=Target("no-such-project", "run-no-such-run", far + 1, "art_" + "Z" * 22, *range(far + 2, far + 12)),
        callers=callers,
        acme_run_ids=set(acme.runs.values_list("run_id", flat=True)),
        acme_open_asks=Ask.objects.filter(project=acme, status=Ask.Status.OPEN).count(),
    )
