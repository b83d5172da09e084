"""The overview's asks charts read counters the rollups keep, not the asks: `Ask.rolled_up` says
what of an ask is counted. Asks stored before start at nothing counted, so the worker's first
passes count them all once, into the same counters.

Not atomic: the column is added with its default in the catalogue (nothing rewritten), and its
index is built CONCURRENTLY, as agents keep opening asks and people deciding them meanwhile.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

KINDS = [
    ("events", "events stored"),
    ("run-started", "runs started"),
    ("run-ended", "runs ended"),
    ("refusal-category", "refusals by category"),
    ("refusal-rule", "refusals by rule"),
    ("tool-error", "tool calls that failed"),
    ("tool-refusal", "refusals of a tool"),
    ("ask-opened", "asks opened"),
    ("ask-decided", "asks decided"),
    ("ask-timed-out", "asks closed by their deadline"),
    ("ask-decision-time", "asks decided, by time to decision"),
]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0038_notification_due_index"),
    ]

    operations = [
        *(
            migrations.AlterField(
                model_name=counter, name="kind", field=models.CharField(choices=KINDS, max_length=24)
            )
            for counter in ("activitycount", "activityhourcount", "activitydaycount")
        ),
        migrations.AddField(
            model_name="ask",
            name="rolled_up",
            field=models.SmallIntegerField(db_default=0),
        ),
        AddIndexConcurrently(
            model_name="ask",
            index=models.Index(
                condition=models.Q(
                    ("rolled_up", 0), models.Q(("decided_at__isnull", False), ("rolled_up", 1)), _connector="OR"
                ),
                fields=["project"],
                name="ask_rollup_pending",
            ),
        ),
    ]
