from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from tenancy.models import AGENT_SCOPES, AgentKey
from tenancy.services import Actor, agent_key_create, project_get_or_create


class Command(BaseCommand):
    help = "Create an agent key (creating the project if needed). The key is printed alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--scopes",
            nargs="+",
            default=AGENT_SCOPES,
            choices=AgentKey.Scope.values,
            help=f"default: {' '.join(AGENT_SCOPES)}; 'decide' (deciding asks over the API) is for integrations",
        )
        parser.add_argument("--name", default="", help="a label for the key")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with transaction.atomic():  # a refused key leaves no new project behind
                project = project_get_or_create(slug=options["project"])
                key, secret = agent_key_create(
                    project=project,
                    scopes=options["scopes"],
                    name=options["name"],
                    actor=Actor.command("create_agent_key"),
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"Key {key.prefix}… for project '{project.slug}' with scopes {', '.join(key.scopes)}. "
            "It is shown once; store it now."
        )
        self.stdout.write(secret)
