from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from tenancy.models import AGENT_SCOPES, AgentKey
from tenancy.selectors import role_of
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
            help=f"default: {' '.join(AGENT_SCOPES)}; 'decide' (deciding asks over the API) is for integrations; "
            "'admin' (who is told and who decides, over the API) is a project admin's own key: name them with --person",
        )
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument(
            "--person", default=None, help="the project admin a key with scope 'admin' acts for (their username)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        actor = Actor.command("create_agent_key")
        try:
            with transaction.atomic():  # a refused key leaves no new project behind
                project = project_get_or_create(slug=options["project"])
                if AgentKey.Scope.ADMIN in options["scopes"]:
                    actor = self._admin(options["person"], project)
                key, secret = agent_key_create(
                    project=project, scopes=options["scopes"], name=options["name"], actor=actor
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"Key {key.prefix}… for project '{project.slug}' with scopes {', '.join(key.scopes)}. "
            "It is shown once; store it now."
        )
        self.stdout.write(secret)

    def _admin(self, username: str | None, project: Any) -> Actor:
        """The admin an 'admin' key acts for: the key_minted change names them, and each call checks
        they are still an admin of the project."""
        if not username:
            raise ValueError("A key with scope 'admin' acts for a project admin: name them with --person <username>.")
        person = get_user_model().objects.filter(username=username).first()
        if person is None or role_of(user=person, project=project) != "admin":
            raise ValueError(f"--person: {username!r} is not an admin of project {project.slug}.")
        return Actor.of_user(person, place="create_agent_key")
