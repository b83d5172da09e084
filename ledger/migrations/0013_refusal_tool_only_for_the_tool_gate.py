from django.db import migrations

# Permission refusals of other gates (a skill read, memory, the network) took their target, a skill
# id or a host, as a tool name and landed in the refusal page's "By tool" groups. Projections are
# not hash-chained: correcting them edits no evidence.
FORWARD = """
UPDATE ledger_refusal f SET tool_name = NULL
FROM ledger_permissionverdict v
WHERE f.category = 'permission' AND f.tool_name IS NOT NULL
    AND v.run_id = f.run_id AND v.seq = f.seq AND v.capability <> 'tool_call'
"""
BACKWARD = """
UPDATE ledger_refusal f SET tool_name = v.target
FROM ledger_permissionverdict v
WHERE f.category = 'permission' AND f.tool_name IS NULL
    AND v.run_id = f.run_id AND v.seq = f.seq AND v.capability <> 'tool_call'
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0012_webhookattempt_url")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
