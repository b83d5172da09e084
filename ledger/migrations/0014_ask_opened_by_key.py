import django.db.models.deletion
from django.db import migrations, models

# Asks stored before this knew only the key their checkpoint is bound to; it is the best record
# of who opened them. Asks opened from events, or without a checkpoint, stay unattributed.
FORWARD = "UPDATE ledger_ask SET opened_by_key_id = posted_by_key_id WHERE posted_by_key_id IS NOT NULL"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0013_refusal_tool_only_for_the_tool_gate"),
    ]

    operations = [
        migrations.AddField(
            model_name="ask",
            name="opened_by_key",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="ledger.agentkey",
            ),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop),
    ]
