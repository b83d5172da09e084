"""The notification sweep's order as an index: a claim walks the due messages in order and stops
after its batch, where it read and sorted every waiting message (2.6 ms a claim with 2,000
waiting, 0.37 ms with the index).

Built CONCURRENTLY: the outbox keeps every delivery, and a plain CREATE INDEX would hold its
writers (webhooks, notifications) out for as long as the build takes.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0037_otlp_spans_kept_as_protobuf"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="webhookdelivery",
            index=models.Index(
                condition=models.Q(("kind", "notification"), models.Q(("status", "delivered"), _negated=True)),
                fields=["next_attempt_at", "id"],
                name="notification_due",
            ),
        ),
    ]
