from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.asks.webhooks import webhook_endpoint_set, webhook_endpoint_turn_off
from tenancy.models import Project


class Command(BaseCommand):
    help = "Point a project's decision webhook at a URL; prints the signing secret on its last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--url", help="where decisions are POSTed; omit with --off to disable")
        parser.add_argument("--off", action="store_true", help="stop delivering")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"No project '{options['project']}'.")
        if options["off"]:
            webhook_endpoint_turn_off(project=project)
            self.stdout.write(
                f"Decisions of {project.slug} are no longer delivered; those waiting stay in the outbox "
                "and go out once --url sets the webhook again."
            )
            return
        try:
            endpoint = webhook_endpoint_set(project=project, url=options["url"] or "")
        except ValueError as exc:
            raise CommandError(f"--url: {exc}") from exc
        self.stderr.write(
            f"Decisions of {project.slug} go to {endpoint.url}, signed with HMAC-SHA256 "
            "(X-Footprint-Signature: sha256=<hex>). The secret:"
        )
        self.stdout.write(endpoint.secret)
