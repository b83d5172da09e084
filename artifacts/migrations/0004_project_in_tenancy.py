"""The artifact store's project now lives in the tenancy app (same table)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('artifacts', '0003_jsonb_decoder'),
        ('tenancy', '0001_initial'),
    ]

    operations = [
        # The tables stay where they are: only Django's idea of which app owns them changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.AlterField(
                model_name='artifactstore',
                name='project',
                field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='artifact_store', to='tenancy.project'),
            ),
            ],
        ),
    ]
