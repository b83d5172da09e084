import django.db.models.deletion
from django.db import migrations, models

# At most one open ask per session from here on: of the asks stored before, each session keeps its
# newest open one, and the older ones are superseded by it, as they would have been on arrival.
FORWARD = """
UPDATE ledger_ask AS older SET status = 'superseded', superseded_by_id = newest.id
FROM (SELECT project_id, session_id, max(id) AS id FROM ledger_ask
      WHERE status = 'open' AND session_id IS NOT NULL GROUP BY project_id, session_id) AS newest
WHERE older.status = 'open' AND older.project_id = newest.project_id
  AND older.session_id = newest.session_id AND older.id < newest.id
"""
# Superseded asks were open before: they are again (no decision was ever recorded on them).
BACKWARD = "UPDATE ledger_ask SET status = 'open' WHERE status = 'superseded'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0015_run_has_recording"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="ask", name="ask_decided_has_time"),
        migrations.AddField(
            model_name="ask",
            name="superseded_by",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="ledger.ask"
            ),
        ),
        migrations.AlterField(
            model_name="ask",
            name="status",
            field=models.CharField(
                choices=[("open", "Open"), ("decided", "Decided"), ("superseded", "Superseded")],
                default="open",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="ask",
            index=models.Index(
                condition=models.Q(("status", "open")), fields=["project", "session_id"], name="ask_open_in_session"
            ),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
        migrations.AddConstraint(
            model_name="ask",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("decided_at__isnull", True), ("status__in", ["open", "superseded"])),
                    models.Q(("decided_at__isnull", False), ("status", "decided")),
                    _connector="OR",
                ),
                name="ask_decided_has_time",
            ),
        ),
    ]
