"""Projects, agent keys and memberships moved to the tenancy app, tables and rows untouched."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('artifacts', '0004_project_in_tenancy'),
        ('ledger', '0022_ask_answered'),
        ('tenancy', '0001_initial'),
    ]

    operations = [
        # The tables stay where they are: only Django's idea of which app owns them changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.AlterField(
                model_name='ask',
                name='decided_by_key',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.agentkey'),
            ),
            migrations.AlterField(
                model_name='ask',
                name='posted_by_key',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tenancy.agentkey'),
            ),
            migrations.RemoveField(
                model_name='membership',
                name='project',
            ),
            migrations.RemoveField(
                model_name='membership',
                name='user',
            ),
            migrations.AlterField(
                model_name='auditbundle',
                name='project',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='audit_bundles', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='anchoredhead',
                name='project',
                field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='ask',
                name='project',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='asks', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='run',
                name='project',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='webhookendpoint',
                name='project',
                field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='webhook', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='chainanchor',
                name='project',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='chain_anchors', to='tenancy.project'),
            ),
            migrations.AlterField(
                model_name='otlpspan',
                name='project',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='otlp_spans', to='tenancy.project'),
            ),
            migrations.DeleteModel(
                name='AgentKey',
            ),
            migrations.DeleteModel(
                name='Membership',
            ),
            migrations.DeleteModel(
                name='Project',
            ),
            ],
        ),
    ]
