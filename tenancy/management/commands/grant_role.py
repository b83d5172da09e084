from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy.models import Membership, Project
from tenancy.services import Actor, membership_grant


class Command(BaseCommand):
    help = "Give a user a role (auditor, approver, admin) in a project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--role", required=True, choices=Membership.Role.values)

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(
                f"No user '{options['user']}'. Create one with `manage.py createsuperuser` or the admin."
            )
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"No project '{options['project']}'. `create_agent_key --project` creates one.")
        membership_grant(user=user, project=project, role=options["role"], actor=Actor.command("grant_role"))
        self.stdout.write(f"{user.get_username()} is now {options['role']} of {project.slug}.")
