import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Project, WebhookEndpoint


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
            WebhookEndpoint.objects.filter(project=project).update(active=False)
            self.stdout.write(f"Decisions of {project.slug} are no longer delivered.")
            return
        if not options["url"] or not options["url"].startswith(("https://", "http://")):
            raise CommandError("--url must be an http(s) URL.")
        endpoint, _ = WebhookEndpoint.objects.update_or_create(
            project=project, defaults={"url": options["url"], "secret": secrets.token_hex(32), "active": True}
        )
        self.stderr.write(
            f"Decisions of {project.slug} go to {endpoint.url}, signed with HMAC-SHA256 "
            "(X-Footprint-Signature: sha256=<hex>). The secret:"
        )
        self.stdout.write(endpoint.secret)
