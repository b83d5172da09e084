from django.db import migrations, models

# A message middleware's deny (moment input or output) ends its run (spec §1.6: the chart stops,
# `run()` throws MessageDeniedError). Runs stored before read `running` or whatever came earlier;
# a run whose latest status-moving event is such a deny is now `denied`.
FORWARD = """
UPDATE ledger_run AS run SET status = 'denied', status_seq = denial.seq
FROM (
    SELECT run_id, max(seq) AS seq FROM ledger_middlewaredecision
    WHERE outcome = 'deny' AND moment IN ('input', 'output') AND seq IS NOT NULL
    GROUP BY run_id
) AS denial
WHERE denial.run_id = run.id AND denial.seq > run.status_seq
"""

# Backward, a denied run takes the status of its latest other status-moving event (0018's rule).
BACKWARD = """
UPDATE ledger_run AS run SET status = COALESCE(prior.status, 'running'), status_seq = COALESCE(prior.seq, -1)
FROM ledger_run AS denied
LEFT JOIN LATERAL (
    SELECT e.seq, CASE e.type
        WHEN 'agentfootprint.agent.turn_start' THEN 'running'
        WHEN 'agentfootprint.pause.request' THEN 'paused'
        WHEN 'agentfootprint.agent.turn_end' THEN 'completed'
        WHEN 'agentfootprint.error.fatal' THEN 'failed'
        WHEN 'agentfootprint.permission.halt' THEN 'halted' END AS status
    FROM ledger_runevent AS e
    WHERE e.run_id = denied.id AND e.seq IS NOT NULL
      AND e.type IN ('agentfootprint.agent.turn_start', 'agentfootprint.pause.request',
                     'agentfootprint.agent.turn_end', 'agentfootprint.error.fatal',
                     'agentfootprint.permission.halt')
      AND NOT (e.type = 'agentfootprint.error.fatal'
               AND (e.doc -> 'payload' ->> 'stage') IS NOT DISTINCT FROM 'observer')
    ORDER BY e.seq DESC LIMIT 1
) AS prior ON true
WHERE denied.id = run.id AND run.status = 'denied'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0019_anchor_digest_format"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("paused", "Paused"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("halted", "Halted"),
                    ("denied", "Denied"),
                ],
                default="running",
                max_length=16,
            ),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
    ]
