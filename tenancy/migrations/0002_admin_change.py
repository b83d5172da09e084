"""The record of admin changes: append-only, listed per project newest first."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenancy', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AdminChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('actor_label', models.CharField(max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('action', models.CharField(choices=[('key_minted', 'Agent key minted'), ('key_revoked', 'Agent key revoked'), ('role_granted', 'Role granted'), ('role_changed', 'Role changed'), ('role_removed', 'Role removed'), ('retention_changed', 'Artifact retention changed'), ('hold_placed', 'Artifact hold placed'), ('hold_released', 'Artifact hold released')], max_length=32)),
                ('target_type', models.CharField(max_length=32)),
                ('target_id', models.CharField(max_length=64)),
                ('target_label', models.CharField(max_length=200)),
                ('before', models.JSONField(blank=True, null=True)),
                ('after', models.JSONField(blank=True, null=True)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='admin_changes', to='tenancy.project')),
            ],
            options={
                'indexes': [models.Index(fields=['project', '-id'], name='adminchange_project_newest')],
            },
        ),
    ]
