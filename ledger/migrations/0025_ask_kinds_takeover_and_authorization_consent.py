# Choices only (no SQL): a person takeover (a browser handed to a person, agentfootprint 9.69) is
# an ask kind of its own, and the 3LO consent pause reads as what it is, an authorization consent.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0024_run_status_thrown_endings"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ask",
            name="kind",
            field=models.CharField(
                choices=[
                    ("ask", "middleware ask"),
                    ("checkIn", "check-in"),
                    ("plain", "question (askHuman)"),
                    ("credential", "authorization consent"),
                    ("takeover", "person takeover"),
                ],
                max_length=16,
            ),
        ),
    ]
