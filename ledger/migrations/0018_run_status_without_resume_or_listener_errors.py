from django.db import migrations

# Runs stored before this migration read `running` after a `pause.resume` (a resume runs as a new run,
# spec §2.4) and `failed` after a listener's `error.fatal` (stage 'observer', spec §4.1); the
# projection no longer moves a status on either. Such a run gets the status of its latest event
# that moves one (ledger.ingest.projections.STATUS_BY_TYPE), or `running` with none, as on ingestion now.
FORWARD = """
UPDATE ledger_run AS run SET status = COALESCE(prior.status, 'running'), status_seq = COALESCE(prior.seq, -1)
FROM ledger_runevent AS moved
LEFT JOIN LATERAL (
    SELECT e.seq, CASE e.type
        WHEN 'agentfootprint.agent.turn_start' THEN 'running'
        WHEN 'agentfootprint.pause.request' THEN 'paused'
        WHEN 'agentfootprint.agent.turn_end' THEN 'completed'
        WHEN 'agentfootprint.error.fatal' THEN 'failed'
        WHEN 'agentfootprint.permission.halt' THEN 'halted' END AS status
    FROM ledger_runevent AS e
    WHERE e.run_id = moved.run_id AND e.seq < moved.seq
      AND e.type IN ('agentfootprint.agent.turn_start', 'agentfootprint.pause.request',
                     'agentfootprint.agent.turn_end', 'agentfootprint.error.fatal',
                     'agentfootprint.permission.halt')
      -- IS NOT DISTINCT FROM: an error.fatal without a stage (NULL) is a failure, not a listener's
      AND NOT (e.type = 'agentfootprint.error.fatal'
               AND (e.doc -> 'payload' ->> 'stage') IS NOT DISTINCT FROM 'observer')
    ORDER BY e.seq DESC LIMIT 1
) AS prior ON true
WHERE moved.run_id = run.id AND moved.seq = run.status_seq
  AND ((run.status = 'running' AND moved.type = 'agentfootprint.pause.resume')
    OR (run.status = 'failed' AND moved.type = 'agentfootprint.error.fatal'
        AND moved.doc -> 'payload' ->> 'stage' = 'observer'))
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0017_ask_paused_at_and_superseded_by_latest"),
    ]

    # Backward there is nothing to restore: the old statuses were the defect.
    operations = [migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop)]
