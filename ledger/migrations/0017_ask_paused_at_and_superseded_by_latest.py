from django.db import migrations, models

# Asks learn when they paused (their pause event's meta.wallClockMs); the asks stored before have
# no such time, so arrival orders them, as it did. 0016 kept each session's newest *open* ask, so
# an open ask whose session paused again since, in an ask decided by now, stayed open for ever.
# The rule on arrival is "every open ask but the session's latest, whatever the latest's status":
# applied here to what 0016 left.
FORWARD = """
UPDATE ledger_ask AS earlier SET status = 'superseded', superseded_by_id = latest.id
FROM (SELECT project_id, session_id, max(id) AS id FROM ledger_ask
      WHERE session_id IS NOT NULL GROUP BY project_id, session_id) AS latest
WHERE earlier.status = 'open' AND earlier.project_id = latest.project_id
  AND earlier.session_id = latest.session_id AND earlier.id < latest.id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0016_ask_superseded"),
    ]

    # Backward the data steps have nothing to undo: 0016's reverse reopens every superseded ask.
    operations = [
        migrations.AddField(model_name="ask", name="paused_at_ms", field=models.BigIntegerField(blank=True, null=True)),
        migrations.AddField(
            model_name="ask", name="pause_reported", field=models.BooleanField(db_default=False, default=False)
        ),
        migrations.AddField(
            model_name="ask", name="opened_from_event", field=models.BooleanField(db_default=False, default=False)
        ),
        # Superseding reads every ask of the session, decided ones included.
        migrations.RemoveIndex(model_name="ask", name="ask_open_in_session"),
        migrations.AddIndex(
            model_name="ask", index=models.Index(fields=["project", "session_id"], name="ask_in_session")
        ),
        # The asks stored before keep their order of arrival (as pauses reported without a clock).
        migrations.RunSQL("UPDATE ledger_ask SET pause_reported = true", reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop),
    ]
