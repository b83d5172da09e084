from django.db import migrations

# A tool call id longer than 512 characters (ledger.projections.MAX_CALL_ID_CHARS) files its event
# as no call's: at 2,700 bytes and more PostgreSQL's btree refused the row (a 500). Rows stored
# before this rule with such an id (shorter than the btree's limit, so stored) are re-derived by
# it, as verify now derives the event's column: no call row, no call id on the decisions,
# effects and refusals; the hashed bytes keep the id. Backward, the events' column is
# derived again as the rule before this one did, where its btree can hold it; the call rows and
# the other tables' ids are not (a run's batches re-sent would not bring them back either).
FORWARD = """
UPDATE ledger_runevent SET tool_call_id = NULL WHERE tool_call_id IS NOT NULL AND length(tool_call_id) > 512;
UPDATE ledger_middlewaredecision SET tool_call_id = NULL WHERE length(tool_call_id) > 512;
UPDATE ledger_tooleffect SET tool_call_id = NULL WHERE length(tool_call_id) > 512;
UPDATE ledger_refusal SET tool_call_id = NULL WHERE length(tool_call_id) > 512;
UPDATE ledger_run AS run SET tool_call_count = run.tool_call_count - overlong.calls
FROM (SELECT run_id, count(*) AS calls FROM ledger_toolcall WHERE length(tool_call_id) > 512 GROUP BY run_id) AS overlong
WHERE overlong.run_id = run.id;
DELETE FROM ledger_toolcall WHERE length(tool_call_id) > 512;
"""

BACKWARD = """
UPDATE ledger_runevent SET tool_call_id = doc -> 'payload' ->> 'toolCallId'
WHERE tool_call_id IS NULL AND jsonb_typeof(doc -> 'payload' -> 'toolCallId') = 'string'
  AND length(doc -> 'payload' ->> 'toolCallId') > 512 AND octet_length(doc -> 'payload' ->> 'toolCallId') <= 2048
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0020_run_status_denied"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
