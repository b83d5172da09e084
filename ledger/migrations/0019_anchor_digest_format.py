from django.db import migrations, models

# Anchors signed before this migration used format 1 (ledger.anchors): they keep it, so their
# signatures still check; anchors written from now on use format 2.


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0018_run_status_without_resume_or_listener_errors"),
    ]

    operations = [
        migrations.AddField(
            model_name="chainanchor",
            name="digest_format",
            field=models.PositiveSmallIntegerField(default=1),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="chainanchor",
            name="digest_format",
            field=models.PositiveSmallIntegerField(default=2),
        ),
    ]
