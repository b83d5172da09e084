"""The index that becomes ledger_runevent's primary key in 0009, built without blocking ingestion.

CONCURRENTLY cannot run inside a transaction, hence its own non-atomic migration. A build that
was interrupted leaves an invalid index behind: it is dropped and built again.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0007_toolcall_args_and_result_read_from_events"),
    ]

    operations = [
        migrations.RunSQL(
            [
                "DROP INDEX CONCURRENTLY IF EXISTS runevent_chain_key",
                "CREATE UNIQUE INDEX CONCURRENTLY runevent_chain_key ON ledger_runevent (run_id, position)",
            ],
            reverse_sql=["DROP INDEX CONCURRENTLY IF EXISTS runevent_chain_key"],
        ),
    ]
