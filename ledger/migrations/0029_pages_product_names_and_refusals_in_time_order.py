"""The refusal list in time order, and model names the admin spells right.

The refusal list walks `refusal_by_time` newest first (ledger.refusals.selectors.REFUSAL_TIME);
it is built CONCURRENTLY, so ingestion keeps writing refusals meanwhile, hence a non-atomic
migration.
"""

import django.db.models.functions.comparison
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0028_otlp_spans_without_fk_checks"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="ledgerretention",
            options={"verbose_name": "run retention"},
        ),
        migrations.AlterModelOptions(
            name="otlpspan",
            options={"verbose_name": "OTLP span"},
        ),
        migrations.AlterModelOptions(
            name="webhookdelivery",
            options={"verbose_name_plural": "webhook deliveries"},
        ),
        AddIndexConcurrently(
            model_name="refusal",
            index=models.Index(
                models.OrderBy(
                    django.db.models.functions.comparison.Coalesce("wall_clock_ms", models.Value(-1)), descending=True
                ),
                models.OrderBy(models.F("id"), descending=True),
                name="refusal_by_time",
            ),
        ),
    ]
