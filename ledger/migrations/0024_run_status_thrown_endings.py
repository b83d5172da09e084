from django.db import migrations

# A run whose run()/resume() threw (a message deny, a policy halt) keeps that ending whatever the
# framework emitted after it: an output deny is followed by `agent.turn_end`, an input deny by
# `agent.turn_start`, so runs stored before read `completed` or `running`. The keys are
# ledger.ingest.projections.THROWN_ENDING_KEYS (MAX_SEQ - 1, MAX_SEQ), written out: a migration
# must not change with the code.
FORWARD = """
UPDATE ledger_run AS run SET status = ending.status, status_seq = ending.key
FROM (
    SELECT DISTINCT ON (run_id) run_id, status, key FROM (
        SELECT e.run_id,
            CASE e.type WHEN 'agentfootprint.middleware.decision' THEN 'denied' ELSE 'halted' END AS status,
            CASE e.type WHEN 'agentfootprint.middleware.decision' THEN 2147483647 ELSE 2147483646 END AS key
        FROM ledger_runevent AS e
        WHERE e.seq IS NOT NULL
          AND (e.type = 'agentfootprint.permission.halt'
               OR (e.type = 'agentfootprint.middleware.decision'
                   AND jsonb_typeof(e.doc -> 'payload') = 'object'
                   AND e.doc -> 'payload' -> 'outcome' = '"deny"'
                   AND e.doc -> 'payload' -> 'moment' IN ('"input"', '"output"')))
    ) AS endings
    ORDER BY run_id, key DESC
) AS ending
WHERE ending.run_id = run.id AND ending.key > run.status_seq
"""

# Backward, a thrown ending keeps its status and takes the run's highest seq as its key.
BACKWARD = """
UPDATE ledger_run SET status_seq = max_seq WHERE status_seq >= 2147483646
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0023_tenancy_moved_out"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
    ]
