from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0011_agent_key_decide_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookattempt",
            name="url",
            field=models.URLField(default="", max_length=500),
            preserve_default=False,
        ),
        # Until now every attempt went to the URL its delivery was created with.
        migrations.RunSQL(
            "UPDATE ledger_webhookattempt a SET url = d.url FROM ledger_webhookdelivery d WHERE d.id = a.delivery_id",
            migrations.RunSQL.noop,
        ),
    ]
