from django.db import migrations

# A tool call id longer than 512 characters (ledger.projections.MAX_CALL_ID_CHARS) files its event
# as no call's: at 2,700 bytes and more PostgreSQL's btree refused the row (a 500). Rows stored
# before this rule with such an id (shorter than the btree's limit, so stored) are re-derived by
# it, as verify now derives the column; the hashed bytes keep the id. Backward, the column is
# derived from the stored event again, as the rule before this one did, where its btree can hold it.
FORWARD = """
UPDATE ledger_runevent SET tool_call_id = NULL
WHERE tool_call_id IS NOT NULL AND length(tool_call_id) > 512
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
