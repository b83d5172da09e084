"""Projects, agent keys and memberships, moved from the ledger app with their tables (`ledger_*`)."""

import django.contrib.postgres.fields
import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


MOVED = ["project", "agentkey", "membership"]


def _relabel(apps, source, target):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label=source, model__in=MOVED).update(app_label=target)


def move_content_types(apps, schema_editor):
    _relabel(apps, "ledger", "tenancy")


def move_content_types_back(apps, schema_editor):
    _relabel(apps, "tenancy", "ledger")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('ledger', '0022_ask_answered'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The tables stay where they are: only Django's idea of which app owns them changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Project',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('slug', models.SlugField(max_length=64, unique=True)),
                    ('name', models.CharField(max_length=200)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ],
                options={
                    'db_table': 'ledger_project',
                },
            ),
            migrations.CreateModel(
                name='AgentKey',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(blank=True, max_length=200)),
                    ('prefix', models.CharField(max_length=16, unique=True)),
                    ('secret_hash', models.BinaryField(max_length=32, unique=True)),
                    ('scopes', django.contrib.postgres.fields.ArrayField(base_field=models.CharField(choices=[('ingest', 'Ingest'), ('artifacts', 'Artifacts'), ('asks', 'Asks'), ('read', 'Read'), ('decide', 'Decide')], max_length=16), size=None)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('revoked_at', models.DateTimeField(blank=True, null=True)),
                    ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='agent_keys', to='tenancy.project')),
                ],
                options={
                    'db_table': 'ledger_agentkey',
                },
            ),
            migrations.CreateModel(
                name='Membership',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('role', models.CharField(choices=[('auditor', 'Auditor'), ('approver', 'Approver'), ('admin', 'Admin')], max_length=16)),
                    ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to=settings.AUTH_USER_MODEL)),
                    ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='tenancy.project')),
                ],
                options={
                    'db_table': 'ledger_membership',
                    'constraints': [models.UniqueConstraint(fields=('user', 'project'), name='membership_one_role_per_project')],
                },
            ),
            ],
        ),
        # Permissions and admin history point at content types by id: they follow the move.
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
