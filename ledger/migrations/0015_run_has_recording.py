from django.db import migrations, models

FORWARD = "UPDATE ledger_run SET has_recording = true WHERE id IN (SELECT run_id FROM ledger_recording)"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0014_ask_reporting_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="has_recording",
            field=models.BooleanField(db_default=False),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop),
    ]
