import django.db.models.deletion
import django.db.models.functions.datetime
import footprint_site.lib.jsonb
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0030_overview_rollups'),
        ('tenancy', '0003_run_retention_admin_changes'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunSpan',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('lane', models.SmallIntegerField()),
                ('kind', models.CharField(choices=[('turn', 'turn'), ('iteration', 'iteration'), ('llm', 'LLM call'), ('tool', 'tool call'), ('dispatch-step', 'dispatch step'), ('subflow', 'subflow'), ('ask-wait', "a person's wait"), ('refusal', 'refusal'), ('artifact', 'artifact mark')], max_length=16)),
                ('start_ms', models.BigIntegerField()),
                ('end_ms', models.BigIntegerField()),
                ('first_seq', models.IntegerField(blank=True, null=True)),
                ('last_seq', models.IntegerField(blank=True, null=True)),
                ('position', models.IntegerField()),
                ('label', models.TextField()),
                ('refused', models.BooleanField(default=False)),
            ],
        ),
        migrations.CreateModel(
            name='RunSpanOverview',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('indexed_length', models.IntegerField()),
                ('duration_ms', models.BigIntegerField()),
                ('lanes', models.JSONField(decoder=footprint_site.lib.jsonb.JsonbDecoder)),
                ('buckets', models.JSONField(decoder=footprint_site.lib.jsonb.JsonbDecoder)),
                ('built_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
        ),
        migrations.AddField(
            model_name='run',
            name='spans_indexed',
            field=models.IntegerField(db_default=0),
        ),
        # Runs stored before the waterfall are drawn when someone opens one (the page builds a run
        # never indexed), not all at once by the worker after the upgrade.
        migrations.RunSQL("UPDATE ledger_run SET spans_indexed = chain_length", migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('chain_length__gt', models.F('spans_indexed'))), fields=['id'], name='run_spans_pending'),
        ),
        migrations.AddField(
            model_name='runspan',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ledger.run'),
        ),
        migrations.AddField(
            model_name='runspanoverview',
            name='run',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ledger.run'),
        ),
        migrations.AddIndex(
            model_name='runspan',
            index=models.Index(fields=['run', 'lane', 'start_ms'], name='runspan_by_lane_start'),
        ),
    ]
