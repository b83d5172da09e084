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
        # Changing who is told and who decides (channels, deadline rules, approver groups and
        # rules) over the API. Such a key acts for the project admin who minted it, and only while
        # that person is still one of its admins.
        ADMIN = "admin"

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
AGENT_SCOPES = [scope for scope in AgentKey.Scope.values if scope not in (AgentKey.Scope.DECIDE, AgentKey.Scope.ADMIN)]


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


# The roles whose people may decide a project's asks (auditors read them only).
DECIDING_ROLES = (Membership.Role.APPROVER, Membership.Role.ADMIN)


class AdminChangeQuerySet(models.QuerySet["AdminChange"]):
    """The record is append-only: a bulk update or delete is refused (a project's deletion still
    takes its record with it, through the cascade, which does not go through the queryset)."""

    def update(self, **kwargs: object) -> int:
        raise TypeError("Admin changes are append-only: a correction is a new change, never an edit.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("Admin changes are append-only: they are never deleted.")


class AdminChange(models.Model):
    """One change an admin made to a project's keys, roles, retention (of artifacts or runs) or holds.

    Written by the service that makes the change, in its transaction: the change and its record
    commit together or not at all. `before` and `after` hold only what changed (None when the
    object did not exist before, or no longer exists after).
    """

    class Action(models.TextChoices):
        KEY_MINTED = "key_minted", "Agent key minted"
        KEY_REVOKED = "key_revoked", "Agent key revoked"
        ROLE_GRANTED = "role_granted", "Role granted"
        ROLE_CHANGED = "role_changed", "Role changed"
        ROLE_REMOVED = "role_removed", "Role removed"
        RETENTION_CHANGED = "retention_changed", "Artifact retention changed"
        HOLD_PLACED = "hold_placed", "Artifact hold placed"
        HOLD_RELEASED = "hold_released", "Artifact hold released"
        RUN_RETENTION_CHANGED = "run_retention_changed", "Run retention changed"
        RUN_HOLD_PLACED = "run_hold_placed", "Run hold placed"
        RUN_HOLD_RELEASED = "run_hold_released", "Run hold released"
        APPROVER_GROUP_CREATED = "approver_group_created", "Approver group created"
        APPROVER_ADDED = "approver_added", "Approver added to a group"
        APPROVER_REMOVED = "approver_removed", "Approver removed from a group"
        APPROVAL_RULE_ADDED = "approval_rule_added", "Approval rule added"
        APPROVAL_RULE_REMOVED = "approval_rule_removed", "Approval rule removed"
        STANDING_LIMITS_CHANGED = "standing_limits_changed", "Standing approval limits changed"
        CHANNEL_SET = "notification_channel_set", "Notification channel set"
        CHANNEL_REMOVED = "notification_channel_removed", "Notification channel removed"
        DEADLINE_RULE_SET = "deadline_rule_set", "Deadline rule set"
        DEADLINE_RULE_REMOVED = "deadline_rule_removed", "Deadline rule removed"

    # No index of its own: the (project, -id) index below serves lookups by project too.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="admin_changes", db_index=False)
    # The label is what the page shows, and outlives the user row (whose deletion only clears
    # the link); a change from the command line has no user.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())
    action = models.CharField(max_length=32, choices=Action.choices)
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=64)
    target_label = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    objects = AdminChangeQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["project", "-id"], name="adminchange_project_newest")]

    def __str__(self) -> str:
        return f"{self.get_action_display()}: {self.target_label}, by {self.actor_label}"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self._state.adding:
            raise TypeError("Admin changes are append-only: a correction is a new change, never an edit.")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise TypeError("Admin changes are append-only: they are never deleted.")
