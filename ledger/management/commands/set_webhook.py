import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import URLValidator

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
        url = options["url"] or ""
        max_length = WebhookEndpoint._meta.get_field("url").max_length or 0
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise CommandError(
                f"--url must be an http(s) URL with a host, e.g. https://agents.example/decisions; got {url[:80]!r}."
            ) from None
        if len(url) > max_length:
            raise CommandError(f"--url is at most {max_length} characters; this one has {len(url)}.")
        endpoint, _ = WebhookEndpoint.objects.update_or_create(
            project=project, defaults={"url": options["url"], "secret": secrets.token_hex(32), "active": True}
        )
        self.stderr.write(
            f"Decisions of {project.slug} go to {endpoint.url}, signed with HMAC-SHA256 "
            "(X-Footprint-Signature: sha256=<hex>). The secret:"
        )
        self.stdout.write(endpoint.secret)
