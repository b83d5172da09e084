"""The payload table, partitioned by expiry day (raw SQL: Django does not manage partitions).

Daily partitions are created ahead by the sweeper (`artifacts.partitions.ensure_partitions`);
payloads whose day has no partition yet, and payloads that never expire or are held, live in the
`far` partition and are removed row by row. There is no DEFAULT partition: one would have to be
scanned (under lock) every time a daily partition is created.
"""

from django.db import migrations

from artifacts.partitions import ensure_partitions_sql

CREATE = """
CREATE TABLE artifacts_payload (
    expiry_bucket date NOT NULL,
    artifact_id bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (expiry_bucket, artifact_id)
) PARTITION BY RANGE (expiry_bucket);
CREATE TABLE artifacts_payload_far PARTITION OF artifacts_payload
    FOR VALUES FROM ('9999-12-31') TO (MAXVALUE);
ALTER TABLE artifacts_artifact SET (autovacuum_vacuum_scale_factor = 0.02);
"""


def create_initial_partitions(apps, schema_editor):  # type: ignore[no-untyped-def]
    with schema_editor.connection.cursor() as cursor:
        for statement in ensure_partitions_sql(existing=set()):
            cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0001_initial")]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql="DROP TABLE artifacts_payload;"),
        migrations.RunPython(create_initial_partitions, migrations.RunPython.noop),
    ]
