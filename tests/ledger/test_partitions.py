"""The large per-run tables partitioned by their run's month: new runs' rows go to their month's
partition, reads that know the run prune to it, months are created ahead exactly once however
many beats run, and the upgrade from the single tables keeps every run verifiable while the
version before goes on writing."""

import re
import threading
import time
from typing import Any

import orjson
import pytest
from django.db import connection, connections
from django.db.migrations.executor import MigrationExecutor

from footprint_site.lib.chain import link_hash
from ledger import partitions
from ledger.models import (
    MiddlewareDecision,
    PermissionVerdict,
    Refusal,
    Run,
    RunEvent,
    RunSearchChunk,
    RunSpan,
    ToolCall,
    ToolEffect,
)
from tests.conftest import fixture_events

BEFORE_PARTITIONS = ("ledger", "0035_waterfall_cells_and_branch_lanes")
RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events


def _migrate(target: tuple[str, str] | None = None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes())


def _partitions_holding(run_pk: int, table: str = "ledger_runevent") -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {table} WHERE run_id = %s GROUP BY 1",  # noqa: S608 - fixed names
            [run_pk],
        )
        return dict(cur.fetchall())


def _verify(agent_client: Any, run_id: str) -> bool:
    response = agent_client.get(f"/api/v1/runs/{run_id}/verify")
    assert response.status_code == 200, response.content
    return bool(response.json()["valid"])


@pytest.mark.django_db
def test_a_new_runs_rows_live_in_the_partition_of_the_month_it_was_created_in(agent_client) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    run = Run.objects.get(run_id=RUN_ID)
    month = partitions.current_period()

    assert run.period == month
    assert _partitions_holding(run.pk) == {f"ledger_runevent_p{month}": run.chain_length}
    for table in ("ledger_middlewaredecision", "ledger_toolcall", "ledger_refusal"):
        assert set(_partitions_holding(run.pk, table)) <= {f"{table}_p{month}"}
    assert _verify(agent_client, RUN_ID)


@pytest.mark.django_db
def test_a_read_that_names_the_runs_period_reads_one_partition() -> None:
    """The explorer's keyset page as it queries (ledger.explorer.selectors.run_events_page)."""
    month = partitions.current_period()
    with connection.cursor() as cur:
        cur.execute("EXPLAIN SELECT seq FROM ledger_runevent WHERE run_id = 1 AND seq > 10 ORDER BY seq LIMIT 101")
        every_month = "\n".join(row[0] for row in cur.fetchall())
        cur.execute(
            "EXPLAIN SELECT seq FROM ledger_runevent WHERE run_id = 1 AND period = %s AND seq > 10"
            " ORDER BY seq LIMIT 101",
            [month],
        )
        pruned = "\n".join(row[0] for row in cur.fetchall())

    assert every_month.count(" on ledger_runevent_") > 1  # a scan of each month's partition, and more
    assert "ledger_runevent_legacy" in every_month
    assert pruned.count(" on ledger_runevent_") == 1
    assert f" on ledger_runevent_p{month} " in pruned


def _partitions_scanned(plan: str, table: str) -> set[str]:
    """The partitions of `table` a plan reads (its indexes' names, which extend them, are not counted)."""
    return set(re.findall(rf"\b{table}_(p\d{{6}}|legacy|kept)\b", plan))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "model", [RunEvent, MiddlewareDecision, PermissionVerdict, ToolEffect, Refusal, ToolCall, RunSpan, RunSearchChunk]
)
def test_the_rows_of_one_run_are_read_from_its_months_partition_only(agent_client, model: Any) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    run = Run.objects.get(run_id=RUN_ID)

    plan = model.objects.of_run(run).explain()

    assert _partitions_scanned(plan, model._meta.db_table) == {f"p{run.period}"}


@pytest.mark.django_db
def test_a_calls_arguments_are_read_from_its_runs_partition_at_run_time(agent_client) -> None:
    """`with_args_and_result` reads each call's start and end event: PostgreSQL prunes the
    other months' partitions as it runs the subquery, call by call."""
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    run = Run.objects.get(run_id=RUN_ID)
    calls = ToolCall.objects.of_run(run).with_args_and_result()
    assert any(call.args is not None for call in calls)

    plan = calls.explain(analyze=True)
    read = [line for line in plan.splitlines() if "ledger_runevent_" in line and "never executed" not in line]

    assert _partitions_scanned("\n".join(read), "ledger_runevent") == {f"p{run.period}"}


@pytest.mark.django_db(transaction=True)
def test_months_ahead_are_created_once_however_many_beats_run_the_task_at_once() -> None:
    last = partitions.current_period()
    for _ in range(partitions.MONTHS_AHEAD):
        last = partitions.next_period(last)
    with connection.cursor() as cur:
        for table in partitions.TABLES:
            cur.execute(f"DROP TABLE {partitions.partition_name(table, last)}")
    made: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def beat() -> None:
        try:
            start.wait()
            made.append(partitions.partitions_ensure())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not errors
    assert sorted(made) == [0, len(partitions.TABLES)]
    assert all(partitions.partition_name(t, last) in partitions.existing_partitions() for t in partitions.TABLES)
    assert partitions.partitions_ensure() == 0


def _write_as_the_version_before(run_id: str, events: int) -> None:
    """What the version before ingestion wrote: a run and its chain, with no period anywhere."""
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ledger_run (project_id, run_id, composition_path, source, status, status_seq, tokens_in,"
            " tokens_out, iterations, tool_call_count, refusal_count, event_count, max_seq, chain_length,"
            " head_hash, created_at, updated_at)"
            " SELECT id, %s, '[]', 'events', 'running', -1, 0, 0, 0, 0, 0, 0, -1, 0, %s, now(), now()"
            " FROM ledger_project ORDER BY id LIMIT 1 RETURNING id",
            [run_id, bytes(32)],
        )
        (run_pk,) = cur.fetchone()
        head = bytes(32)
        for seq in range(events):
            body = orjson.dumps(
                {"meta": {"runId": run_id}, "payload": {}, "seq": seq, "type": "agentfootprint.agent.turn_start"},
                option=orjson.OPT_SORT_KEYS,
            )
            prev, head = head, link_hash(head, body)
            cur.execute(
                "INSERT INTO ledger_runevent (run_id, seq, position, type, body, doc, prev_hash, hash)"
                " VALUES (%s, %s, %s, 'agentfootprint.agent.turn_start', %s, %s::jsonb, %s, %s)",
                [run_pk, seq, seq, body.decode(), body.decode(), prev, head],
            )
        cur.execute(
            "UPDATE ledger_run SET chain_length = %s, event_count = %s, max_seq = %s, head_hash = %s WHERE id = %s",
            [events, events, events - 1, head, run_pk],
        )


@pytest.mark.django_db(transaction=True)
def test_the_upgrade_attaches_the_old_tables_in_place_while_the_version_before_goes_on_writing(
    agent_client,
) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    stored = Run.objects.get(run_id=RUN_ID).chain_length
    writes: list[float] = []
    errors: list[BaseException] = []
    upgrading = threading.Event()
    try:
        _migrate(BEFORE_PARTITIONS)  # the single tables, holding the run's rows
        with connection.cursor() as cur:
            cur.execute("SELECT relkind FROM pg_class WHERE relname = 'ledger_runevent'")
            assert cur.fetchone()[0] == "r"
        _write_as_the_version_before("before-the-upgrade", 5)

        def version_before() -> None:
            number = 0
            try:
                while upgrading.is_set():
                    started = time.monotonic()
                    _write_as_the_version_before(f"during-{number}", 3)
                    writes.append(time.monotonic() - started)
                    number += 1
            except BaseException as exc:
                errors.append(exc)
            finally:
                connections.close_all()

        upgrading.set()
        writer = threading.Thread(target=version_before)
        writer.start()
        try:
            _migrate()
        finally:
            upgrading.clear()
            writer.join()
    finally:
        _migrate()  # the rest of the suite runs on the current schema whatever happened

    assert not errors, errors
    assert writes  # the version before wrote throughout the upgrade
    print(f"version-before writes during the upgrade: {len(writes)}, slowest {max(writes) * 1000:.0f} ms")
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE relname = 'ledger_runevent'")
        assert cur.fetchone()[0] == "p"
    old = Run.objects.get(run_id=RUN_ID)
    assert (old.period, old.chain_length) == (partitions.LEGACY_PERIOD, stored)
    assert _partitions_holding(old.pk) == {"ledger_runevent_legacy": stored}
    for run in Run.objects.all():
        assert _verify(agent_client, run.run_id), run.run_id

    # The new version's runs go to this month's partition; an old run goes on in the legacy one.
    more = [
        dict(e, meta={**e["meta"], "runId": "after-the-upgrade"}) for e in fixture_events("a-run-recording/events.json")
    ]
    assert agent_client.ingest(more).status_code == 200
    new = Run.objects.get(run_id="after-the-upgrade")
    assert new.period == partitions.current_period()
    assert _partitions_holding(new.pk) == {f"ledger_runevent_p{new.period}": new.chain_length}
    assert _verify(agent_client, "after-the-upgrade")
    later = {
        "seq": 5,
        "type": "agentfootprint.agent.turn_start",
        "payload": {},
        "meta": {"runId": "before-the-upgrade"},
    }
    assert agent_client.ingest([later]).status_code == 200
    assert _partitions_holding(Run.objects.get(run_id="before-the-upgrade").pk) == {"ledger_runevent_legacy": 6}
    assert _verify(agent_client, "before-the-upgrade")


@pytest.mark.django_db
def test_a_record_written_into_another_partition_is_named_by_verification(agent_client) -> None:
    """The chain walk reads the run's own partition; a row forged under another period is found anyway."""
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    run = Run.objects.get(run_id=RUN_ID)
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ledger_runevent (run_id, period, seq, position, type, body, doc, prev_hash, hash)"
            " SELECT run_id, %s, seq, position, type, body, doc, prev_hash, hash FROM ledger_runevent"
            " WHERE run_id = %s AND period = %s AND position = 3",
            [partitions.KEPT_PERIOD, run.pk, run.period],
        )

    verdict = agent_client.get(f"/api/v1/runs/{RUN_ID}/verify").json()

    assert verdict["valid"] is False
    assert f"record 3 is stored under period {partitions.KEPT_PERIOD}, outside the run's partition" in str(verdict)
