"""The large per-run tables partitioned by their run's month, online: the existing table becomes
the `_legacy` partition in place, no row is copied.

Per table, each step holding at most a lock that lets ingestion go on, except the last:
1. `period` is added with the constant 0 (metadata only since PostgreSQL 11: no rewrite);
2. a CHECK (period < this month) NOT VALID, then VALIDATE (a scan that blocks no writes), so the
   attach below need not scan;
3. each unique key, period added, is built CONCURRENTLY beside the old one;
4. in one short transaction: the new indexes replace the old keys, the table is renamed to
   `<table>_legacy`, the partitioned parent is created with the same columns, keys and indexes,
   and the old table is attached as the partition FOR VALUES FROM (MINVALUE) TO (this month),
   with this month's, the next MONTHS_AHEAD months' and the `_kept` partitions. Attaching finds
   the legacy table's indexes and reuses them; nothing is built or scanned under that lock.

`period` keeps its DEFAULT 0, on `ledger_run` too: the version before, which writes no period,
goes on serving during the upgrade and its runs and rows land together in the legacy partition.
This version always writes the period: new runs take the month they are created in.

Not atomic (CREATE INDEX CONCURRENTLY cannot run in a transaction); each step checks what is
done, so a migration stopped midway is run again (docs/operations.md, "Partitioning the ledger").
Backwards, every partition's rows are gathered into the legacy table, which takes its name and
keys back: for tests and small databases, as that copies rows.
"""

from typing import Any

from django.db import migrations, models, transaction

from ledger import partitions

LOCK_TIMEOUT = "10s"  # the swap waits at most this for its lock, so it never queues writers behind it for long
SEARCH_CHUNK_FK = (
    "ledger_runsearchchunk_run_id_e2bf58db_fk_ledger_run_id",
    "FOREIGN KEY (run_id) REFERENCES ledger_run(id) DEFERRABLE INITIALLY DEFERRED",
)


def _legacy(name: str) -> str:
    return f"{name[:56]}_legacy"


def _fetch(cursor: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    cursor.execute(sql, params)
    return list(cursor.fetchall())


def _is_partitioned(cursor: Any, table: str) -> bool:
    return bool(_fetch(cursor, "SELECT 1 FROM pg_class WHERE relname = %s AND relkind = 'p'", [table]))


def _keys(cursor: Any, table: str) -> list[tuple[str, str, list[str]]]:
    """(name, 'p' or 'u', columns) of the table's primary and unique keys."""
    rows = _fetch(
        cursor,
        "SELECT c.conname, c.contype, array_agg(a.attname ORDER BY k.i) FROM pg_constraint c"
        " CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, i)"
        " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum"
        " WHERE c.conrelid = %s::regclass AND c.contype IN ('p', 'u') GROUP BY c.conname, c.contype",
        [table],
    )
    return [(name, kind, list(columns)) for name, kind, columns in rows]


def _quoted(columns: list[str]) -> str:
    return ", ".join(f'"{column}"' for column in columns)


def _prepare(cursor: Any, table: str, first: int) -> None:
    """Steps 1 to 3, each a statement of its own (autocommit)."""
    if not _fetch(cursor, "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'period'", [table]):
        cursor.execute(f"ALTER TABLE {table} ADD COLUMN period integer NOT NULL DEFAULT {partitions.LEGACY_PERIOD}")
    check = f"{table}_before_partitions"
    if not _fetch(cursor, "SELECT 1 FROM pg_constraint WHERE conname = %s", [check]):
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK (period < {first}) NOT VALID")
    cursor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
    for name, _, columns in _keys(cursor, table):
        if "period" in columns:
            continue
        index = _legacy(name)
        # An index a stopped CREATE INDEX CONCURRENTLY left invalid is built again.
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            [index],
        )
        row = cursor.fetchone()
        if row is not None and not row[0]:
            cursor.execute(f"DROP INDEX CONCURRENTLY {index}")
        cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} ({_quoted([*columns, 'period'])})")


def _swap(cursor: Any, table: str, first: int) -> None:
    """Step 4, inside the caller's transaction."""
    legacy = partitions.partition_name(table, partitions.LEGACY_PERIOD)
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    keys = []
    for name, kind, columns in _keys(cursor, table):
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        word = "PRIMARY KEY" if kind == "p" else "UNIQUE"
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {_legacy(name)} {word} USING INDEX {_legacy(name)}")
        keys.append((name, word, [*columns, "period"]))
    for (name,) in _fetch(
        cursor, "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'", [table]
    ):
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    indexes = _fetch(
        cursor,
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        [table],
    )
    for name, _ in indexes:
        cursor.execute(f"ALTER INDEX {name} RENAME TO {_legacy(name)}")
    next_id = None
    if _fetch(cursor, "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'id'", [table]):
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [table])
        next_id = cursor.fetchone()[0]
        cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id DROP IDENTITY")
    cursor.execute(f"ALTER TABLE {table} RENAME TO {legacy}")

    cursor.execute(f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS) PARTITION BY RANGE (period)")
    if next_id is not None:
        sequence = f"{table}_id_seq"
        cursor.execute(f"CREATE SEQUENCE {sequence} OWNED BY {table}.id START WITH {next_id}")
        cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{sequence}')")
    for name, word, columns in keys:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {word} ({_quoted(columns)})")
    for name, definition in indexes:
        head, _, tail = definition.partition(f" ON public.{table} ")
        cursor.execute(f"{head} ON {table} {tail}")
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ({first})")
    cursor.execute(
        f"CREATE TABLE {partitions.partition_name(table, partitions.KEPT_PERIOD)} PARTITION OF {table}"
        f" FOR VALUES FROM ({partitions.KEPT_PERIOD}) TO (MAXVALUE)"
    )


def partition_tables(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    first = partitions.current_period()
    with connection.cursor() as cursor:
        if not _fetch(cursor, "SELECT 1 FROM pg_attribute WHERE attrelid = 'ledger_run'::regclass AND attname = 'period'", []):
            cursor.execute(f"ALTER TABLE ledger_run ADD COLUMN period integer NOT NULL DEFAULT {partitions.LEGACY_PERIOD}")
        for table in partitions.TABLES:
            if _is_partitioned(cursor, table):
                continue
            _prepare(cursor, table, first)
            with transaction.atomic(using=connection.alias), connection.cursor() as swap:
                _swap(swap, table, first)
        for statement in partitions.ensure_partitions_sql(
            existing=partitions.existing_partitions(cursor), today_period=first
        ):
            cursor.execute(statement)


def unpartition_tables(apps: Any, schema_editor: Any) -> None:
    """Every partition's rows into the legacy table, which takes back the name, keys and identity."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for table in partitions.TABLES:
            if not _is_partitioned(cursor, table):
                continue
            legacy = partitions.partition_name(table, partitions.LEGACY_PERIOD)
            keys = _keys(cursor, table)
            indexes = _fetch(
                cursor,
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass"
                " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
                [table],
            )
            columns = [
                name
                for (name,) in _fetch(
                    cursor,
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                    " AND NOT attisdropped ORDER BY attnum",
                    [table],
                )
            ]
            next_id = None
            if "id" in columns:
                cursor.execute("SELECT nextval(%s)", [f"{table}_id_seq"])
                next_id = cursor.fetchone()[0]
            cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {legacy}")
            cursor.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT IF EXISTS {table}_before_partitions")
            names = _quoted(columns)
            cursor.execute(f"INSERT INTO {legacy} ({names}) SELECT {names} FROM {table}")  # noqa: S608 - catalog names
            cursor.execute(f"DROP TABLE {table} CASCADE")
            for name, kind, key_columns in keys:
                word = "PRIMARY KEY" if kind == "p" else "UNIQUE"
                cursor.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT {_legacy(name)}")
                old = _quoted([column for column in key_columns if column != "period"])
                cursor.execute(f"ALTER TABLE {legacy} ADD CONSTRAINT {name} {word} ({old})")
            for (name,) in indexes:
                cursor.execute(f"ALTER INDEX IF EXISTS {_legacy(name)} RENAME TO {name}")
            cursor.execute(f"ALTER TABLE {legacy} DROP COLUMN period")
            cursor.execute(f"ALTER TABLE {legacy} RENAME TO {table}")
            if next_id is not None:
                cursor.execute(
                    f"ALTER TABLE {table} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {next_id})"
                )
            if table == "ledger_runsearchchunk":
                cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {SEARCH_CHUNK_FK[0]} {SEARCH_CHUNK_FK[1]}")
        cursor.execute("ALTER TABLE ledger_run DROP COLUMN IF EXISTS period")


def _period() -> models.IntegerField:  # type: ignore[type-arg]
    return models.IntegerField()


def _unique(model: str, fields: list[str], name: str) -> list[Any]:
    return [
        migrations.RemoveConstraint(model_name=model, name=name),
        migrations.AddConstraint(model_name=model, constraint=models.UniqueConstraint(fields=fields, name=name)),
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ledger", "0035_waterfall_cells_and_branch_lanes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(partition_tables, unpartition_tables)],
            state_operations=[
                migrations.AddField(
                    model_name="run", name="period", field=models.IntegerField(db_default=0)
                ),
                *[
                    migrations.AddField(model_name=model, name="period", field=_period(), preserve_default=False)
                    for model in (
                        "runevent",
                        "middlewaredecision",
                        "permissionverdict",
                        "tooleffect",
                        "refusal",
                        "toolcall",
                        "runspan",
                        "runsearchchunk",
                    )
                ],
                migrations.AlterField(
                    model_name="runsearchchunk",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="+",
                        to="ledger.run",
                    ),
                ),
                *_unique("runevent", ["run", "seq", "period"], "runevent_unique_seq"),
                *_unique("runsearchchunk", ["run", "first_position", "period"], "search_chunk_once"),
                *_unique("toolcall", ["run", "tool_call_id", "period"], "toolcall_unique_id"),
                *_unique("middlewaredecision", ["run", "seq", "period"], "decision_unique_seq"),
                *_unique("permissionverdict", ["run", "seq", "period"], "verdict_unique_seq"),
                *_unique("tooleffect", ["run", "seq", "period"], "effect_unique_seq"),
                *_unique("refusal", ["run", "seq", "period"], "refusal_unique_seq"),
            ],
        )
    ]
