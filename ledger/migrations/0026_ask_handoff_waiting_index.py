"""The partial index ingestion asks of, for every batch with a call's end: does a takeover or consent wait?"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0025_ask_kinds_takeover_and_authorization_consent'),
        ('tenancy', '0002_admin_change'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='ask',
            index=models.Index(condition=models.Q(('kind__in', ['takeover', 'credential']), ('status__in', ['open', 'superseded'])), fields=['project'], name='ask_handoff_waiting'),
        ),
    ]
