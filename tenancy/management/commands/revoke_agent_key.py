from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy.models import AgentKey
from tenancy.services import Actor, agent_key_revoke


class Command(BaseCommand):
    help = "Revoke an agent key by its prefix (the 8 characters after 'afk_'); revoking it again changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--prefix", required=True, help="the key's prefix, as create_agent_key printed it")

    def handle(self, *args: Any, **options: Any) -> None:
        # A whole secret pasted by mistake names its prefix too; never echo the rest of it.
        prefix = options["prefix"].removeprefix("afk_").split("_")[0].rstrip("…")
        key = AgentKey.objects.select_related("project").filter(prefix=prefix).first()
        if key is None:
            raise CommandError(f"No agent key with prefix '{prefix[:16]}'. The admin lists keys by prefix.")
        already = key.revoked_at is not None
        key = agent_key_revoke(key=key, actor=Actor.command("revoke_agent_key"))
        state = "was already revoked" if already else "is revoked"
        when = f"{key.revoked_at:%Y-%m-%d %H:%M:%S %Z}" if key.revoked_at else "?"
        self.stdout.write(f"Key {key.prefix}… of {key.project.slug} {state} (at {when}).")
