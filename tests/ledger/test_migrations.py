"""The migrations agree with the models; the one that re-keys stored events keeps every event and
its chain, both ways; the ones to one open ask per session leave each session its latest ask open;
the one of run statuses undoes what a resume or a listener's error set; anchors signed before the
digest format keep format 1; moving tenancy out of the ledger app keeps every row."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ledger.audits import anchors, integrity_selectors
from ledger.ingest.projections import THROWN_ENDING_KEYS
from ledger.models import Ask, ChainAnchor, Run, RunEvent
from tests.conftest import fixture_events

BEFORE_REKEY = ("ledger", "0007_toolcall_args_and_result_read_from_events")


@pytest.mark.django_db  # makemigrations checks the applied history against the database
def test_the_models_need_no_migration_that_is_not_written() -> None:
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # exits 1 on a missing migration
    assert "No changes detected" in out.getvalue()


def _events_table() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'ledger_runevent'::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey, a.attnum)"
        )
        primary_key = [name for (name,) in cursor.fetchall()]
        cursor.execute(
            "SELECT count(*), string_agg(encode(hash, 'hex'), ',' ORDER BY run_id, position) FROM ledger_runevent"
        )
        count, hashes = cursor.fetchone()
    return {"primary_key": primary_key, "count": count, "hashes": hashes}


def _migrate(target: tuple[str, str] | None = None) -> None:
    """To `target`, or forward to the newest migration of every app when None."""
    executor = MigrationExecutor(connection)
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_stored_events_are_keyed_by_run_and_position_and_the_rekey_reverses_without_loss(agent_client) -> None:
    response = agent_client.ingest(fixture_events("a-run-recording/events.json"))
    assert response.status_code == 200, response.content
    stored = _events_table()
    assert stored["primary_key"] == ["run_id", "position", "period"]
    assert stored["count"] == Run.objects.get().chain_length > 0

    try:
        _migrate(BEFORE_REKEY)
        before = _events_table()
        assert before["primary_key"] == ["id"]
        assert (before["count"], before["hashes"]) == (stored["count"], stored["hashes"])
    finally:
        _migrate()  # the rest of the suite runs on the current schema whatever happened
    after = _events_table()
    assert after == stored

    verdict = agent_client.get(f"/api/v1/runs/{Run.objects.get().run_id}/verify").json()
    assert verdict["valid"] is True


BEFORE_SUPERSEDED = ("ledger", "0015_run_has_recording")


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_one_open_ask_per_session_supersedes_the_earlier_open_asks(project) -> None:
    rows = [("r1", "s1", "open"), ("r2", "s1", "decided"), ("r3", "s1", "open"), ("r4", "s1", "open")]
    rows += [("r5", "s2", "open"), ("r6", None, "open"), ("r7", None, "open")]
    rows += [("r8", "s3", "open"), ("r9", "s3", "decided")]  # s3 paused again since, and that is decided
    try:
        _migrate(BEFORE_SUPERSEDED)
        with connection.cursor() as cursor:
            for run_id, session, status in rows:
                cursor.execute(
                    "INSERT INTO ledger_ask (project_id, run_id, session_id, tool_call_id, kind, pause_data, status,"
                    " on_timeout, decided_at) VALUES (%s, %s, %s, 't1', 'ask', '{}', %s, 'decline',"
                    " CASE WHEN %s = 'decided' THEN now() END)",
                    [project.pk, run_id, session, status, status],
                )
    finally:
        _migrate()
    asks = {ask.run_id: ask for ask in Ask.objects.all()}
    newest = asks["r4"].pk
    assert {run: (ask.status, ask.superseded_by_id) for run, ask in asks.items()} == {
        "r1": ("superseded", newest), "r2": ("decided", None), "r3": ("superseded", newest),
        "r4": ("open", None), "r5": ("open", None), "r6": ("open", None), "r7": ("open", None),
        "r8": ("superseded", asks["r9"].pk), "r9": ("decided", None),
    }  # fmt: skip


def _event(run_id: str, seq: int, type_: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"runId": run_id, "wallClockMs": 1796040000000 + seq}
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload or {}, "meta": meta}


@pytest.mark.django_db(transaction=True)
def test_the_migration_of_run_statuses_undoes_what_a_resume_or_a_listeners_error_set(agent_client) -> None:
    listener = {"stage": "observer", "message": "a listener threw"}
    runs = {
        "resumed": ["agent.turn_start", "pause.request", "pause.resume"],
        "listener-after-end": ["agent.turn_start", "agent.turn_end", ("error.fatal", listener)],
        "listener-only": [("error.fatal", listener)],
        "really-failed": ["agent.turn_start", ("error.fatal", {"stage": "call-llm", "message": "down"})],
    }
    events = []
    for run_id, steps in runs.items():
        for seq, step in enumerate(steps):
            type_, payload = step if isinstance(step, tuple) else (step, None)
            events.append(_event(run_id, seq, type_, payload))
    assert agent_client.ingest(events).status_code == 200
    # What the projection stored before migration 0018: the last event moved the status.
    stored_before = {"resumed": "running", "listener-after-end": "failed", "listener-only": "failed"}
    for run_id, status in stored_before.items():
        Run.objects.filter(run_id=run_id).update(status=status, status_seq=len(runs[run_id]) - 1)
    try:
        _migrate(("ledger", "0017_ask_paused_at_and_superseded_by_latest"))
    finally:
        _migrate()
    assert dict(Run.objects.values_list("run_id", "status")) == {
        "resumed": "paused", "listener-after-end": "completed", "listener-only": "running", "really-failed": "failed",
    }  # fmt: skip
    assert dict(Run.objects.values_list("run_id", "status_seq")) == {
        "resumed": 1, "listener-after-end": 1, "listener-only": -1, "really-failed": 1,
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_migration_of_run_statuses_keeps_a_failure_whose_error_names_no_stage(agent_client) -> None:
    # An OTLP root span that failed is stored as an error.fatal without a stage: a failure, not a
    # listener's (SQL: its missing stage is NULL, which must not read as "not the observer's").
    events = [
        _event("run-failed-turn", 0, "agent.turn_start"),
        _event("run-failed-turn", 1, "error.fatal", {"message": "model provider down", "source": "otlp"}),
        _event("run-failed-turn", 2, "error.fatal", {"stage": "observer", "message": "a listener threw"}),
    ]
    assert agent_client.ingest(events).status_code == 200
    Run.objects.filter(run_id="run-failed-turn").update(
        status="failed", status_seq=2
    )  # as stored before migration 0018
    try:
        _migrate(("ledger", "0017_ask_paused_at_and_superseded_by_latest"))
    finally:
        _migrate()
    assert Run.objects.values_list("status", "status_seq").get(run_id="run-failed-turn") == ("failed", 1)


@pytest.mark.django_db(transaction=True)
def test_anchors_signed_before_the_digest_format_keep_format_1_and_still_hold(agent_client) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    try:
        _migrate(("ledger", "0018_run_status_without_resume_or_listener_errors"))
        run = Run.objects.only("run_id", "chain_length", "head_hash", "project").get()
        heads = [(run.run_id, run.chain_length, bytes(run.head_hash))]
        digest = anchors.anchor_digest(
            project_slug=run.project.slug, number=1, prev_digest=bytes(32), heads=heads, digest_format=1
        )
        with connection.cursor() as cursor:  # the table as 0018 left it, without digest_format
            cursor.execute(
                "INSERT INTO ledger_chainanchor (project_id, number, prev_digest, digest, signature, run_count,"
                " created_at) VALUES (%s, 1, %s, %s, %s, 1, now()) RETURNING id",
                [run.project_id, bytes(32), digest, anchors.sign(digest)],
            )
            anchor_id = cursor.fetchone()[0]
            cursor.execute(
                "INSERT INTO ledger_anchoredhead (anchor_id, project_id, run_id, chain_length, head_hash)"
                " VALUES (%s, %s, %s, %s, %s)",
                [anchor_id, run.project_id, *heads[0]],
            )
    finally:
        _migrate()
    anchor = ChainAnchor.objects.get()
    assert anchor.digest_format == 1
    assert integrity_selectors.anchor_signature_problem(anchor) is None


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_denied_ends_the_runs_a_message_middleware_refused(agent_client) -> None:
    def decision(run_id: str, seq: int, moment: str) -> dict[str, Any]:
        payload = {"middleware": "no-pii", "moment": moment, "iteration": 0, "outcome": "deny", "changed": False}
        return _event(run_id, seq, "middleware.decision", payload)

    events = [
        _event("input-denied", 0, "agent.turn_start"), decision("input-denied", 1, "input"),
        _event("tool-denied", 0, "agent.turn_start"), decision("tool-denied", 1, "before-tool"),
    ]  # fmt: skip
    assert agent_client.ingest(events).status_code == 200
    assert Run.objects.get(run_id="input-denied").status == "denied"
    try:
        _migrate(("ledger", "0019_anchor_digest_format"))  # backward: the run's latest other status
        assert dict(Run.objects.values_list("run_id", "status")) == {
            "input-denied": "running",
            "tool-denied": "running",
        }
    finally:
        _migrate()
    assert dict(Run.objects.values_list("run_id", "status")) == {"input-denied": "denied", "tool-denied": "running"}
    assert Run.objects.get(run_id="input-denied").status_seq == THROWN_ENDING_KEYS["denied"]  # 0024's key


@pytest.mark.django_db(transaction=True)
def test_the_migration_of_call_ids_files_an_overlong_one_as_verify_now_derives_it(agent_client) -> None:
    """A 600-character call id, stored before the 512-character rule, verifies once migrated."""
    start = _event("long-call", 0, "stream.tool_start", {"toolCallId": "c" * 600})
    assert agent_client.ingest([start]).status_code == 200
    try:
        _migrate(("ledger", "0020_run_status_denied"))  # backward: the column as the old rule derived it
        old = RunEvent.objects.filter(run__run_id="long-call").values_list("tool_call_id", flat=True)
        assert old.get() == "c" * 600
    finally:
        _migrate()
    assert RunEvent.objects.get(run__run_id="long-call").tool_call_id is None
    assert agent_client.get("/api/v1/runs/long-call/verify").json()["valid"] is True


BEFORE_TENANCY = ("tenancy", None)  # projects, keys and memberships still in the ledger app


@pytest.mark.django_db(transaction=True)
def test_moving_tenancy_out_of_the_ledger_keeps_every_row_key_role_and_permission() -> None:
    """An upgrade from the schema where Project, AgentKey and Membership were ledger models: the
    rows stay in their tables, keys still authenticate, roles still hold, runs and artifact stores
    still point at their projects, and permissions granted on the models follow them."""
    from django.contrib.auth.models import Permission, User
    from django.contrib.contenttypes.models import ContentType

    from artifacts.models import ArtifactStore
    from tenancy.models import Membership, Project
    from tenancy.selectors import agent_key_get_by_secret, role_of
    from tenancy.services import hash_secret

    secret = "afk_upgrade-" + "x" * 40
    try:
        _migrate(BEFORE_TENANCY)
        ContentType.objects.clear_cache()
        with connection.cursor() as cursor:
            cursor.execute("SELECT app_label FROM django_content_type WHERE model = 'project' AND app_label <> 'admin'")
            assert [label for (label,) in cursor.fetchall()] == ["ledger"]
            cursor.execute(
                "INSERT INTO ledger_project (slug, name, created_at) VALUES ('old', 'Old', now()) RETURNING id"
            )
            (project_id,) = cursor.fetchone()
            cursor.execute(
                "INSERT INTO ledger_agentkey (project_id, name, prefix, secret_hash, scopes, created_at)"
                " VALUES (%s, 'agent', 'afk_upgr', %s, ARRAY['ingest','read'], now())",
                [project_id, hash_secret(secret)],
            )
            cursor.execute(
                "INSERT INTO auth_user (username, password, is_superuser, first_name, last_name, email, is_staff,"
                " is_active, date_joined) VALUES ('rita', '!', false, '', '', '', true, true, now()) RETURNING id"
            )
            (user_id,) = cursor.fetchone()
            cursor.execute(
                "INSERT INTO ledger_membership (user_id, project_id, role) VALUES (%s, %s, 'approver')",
                [user_id, project_id],
            )
            cursor.execute(
                "INSERT INTO ledger_run (project_id, run_id, composition_path, source, status, status_seq, tokens_in,"
                " tokens_out, iterations, tool_call_count, refusal_count, event_count, max_seq, chain_length,"
                " head_hash) VALUES (%s, 'old-run', '[]', 'events', 'running', -1, 0, 0, 0, 0, 0, 0, -1, 0, %s)",
                [project_id, bytes(32)],
            )
            cursor.execute(
                "INSERT INTO auth_user_user_permissions (user_id, permission_id) SELECT %s, p.id FROM auth_permission p"
                " JOIN django_content_type c ON c.id = p.content_type_id"
                " WHERE c.app_label = 'ledger' AND p.codename = 'view_project'",
                [user_id],
            )
    finally:
        _migrate()
        ContentType.objects.clear_cache()

    project = Project.objects.get(slug="old")
    key = agent_key_get_by_secret(secret=secret)
    assert key is not None
    assert (key.project, key.scopes) == (project, ["ingest", "read"])
    user = User.objects.get(username="rita")
    assert role_of(user=user, project=project) == Membership.Role.APPROVER
    assert Run.objects.get(run_id="old-run").project == project
    assert ArtifactStore.objects.create(project=project).project == project
    assert ContentType.objects.get_for_model(Project).app_label == "tenancy"
    assert not ContentType.objects.filter(app_label="ledger", model__in=["project", "agentkey", "membership"]).exists()
    assert user.has_perm("tenancy.view_project")
    assert Permission.objects.filter(codename="view_project", content_type__app_label="tenancy").count() == 1
