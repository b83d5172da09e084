from django.db import migrations, models

# A decision's value present or absent: JSON null is an answer to a question (spec §2.1), and a
# question closed by its deadline carries none. Decided asks stored before kept only a value or
# SQL NULL (JSON null was refused), so a stored value is exactly a given one.
FORWARD = "UPDATE ledger_ask SET answered = true WHERE value IS NOT NULL"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0021_call_ids_within_the_index_limit"),
    ]

    operations = [
        migrations.AddField(
            model_name="ask",
            name="answered",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunSQL(FORWARD, migrations.RunSQL.noop),
    ]
