"""Who may do what: projects, the agent keys that post into them and people's roles in them.

The tables keep the names they had when these models lived in the ledger app (`ledger_project`,
`ledger_agentkey`, `ledger_membership`): moving a model between apps moved no data.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now


class Project(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ledger_project"

    def __str__(self) -> str:
        return self.slug


class AgentKey(models.Model):
    """An agent's API key. Only the SHA-256 of the secret is stored; `prefix` identifies it."""

    class Scope(models.TextChoices):
        INGEST = "ingest"
        ARTIFACTS = "artifacts"
        ASKS = "asks"
        READ = "read"
        # Deciding asks over the API, for an integration (a chat bot, a ticket system). Never part
        # of an agent's default scopes: an agent holding it could approve its own tool calls.
        DECIDE = "decide"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="agent_keys")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.BinaryField(max_length=32, unique=True)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices))
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ledger_agentkey"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.project.slug})"


# What `create_agent_key` gives a key when no scopes are named: everything an agent does.
AGENT_SCOPES = [scope for scope in AgentKey.Scope.values if scope != AgentKey.Scope.DECIDE]


class Membership(models.Model):
    class Role(models.TextChoices):
        AUDITOR = "auditor"
        APPROVER = "approver"
        ADMIN = "admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        db_table = "ledger_membership"
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="membership_one_role_per_project")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.project}"
