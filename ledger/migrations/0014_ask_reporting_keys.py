import django.contrib.postgres.fields
from django.db import migrations, models

# Asks stored before this knew only the key their checkpoint is bound to: the best record of who
# reported them. Asks opened from events, or without a checkpoint, stay unattributed.
FORWARD = "UPDATE ledger_ask SET reporting_key_ids = ARRAY[posted_by_key_id] WHERE posted_by_key_id IS NOT NULL"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0013_refusal_tool_only_for_the_tool_gate"),
    ]

    operations = [
        migrations.AddField(
            model_name="ask",
            name="reporting_key_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(), blank=True, db_default=[], default=list, size=None
            ),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop),
    ]
