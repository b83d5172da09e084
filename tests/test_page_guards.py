"""The pages only a project's admins may use answer through one guard (footprint_site.pages.
project_for_admin): 403 with the page's sentence for its other members, 404 for anyone outside
the project, the page for its admins. No view keeps a check of its own."""

import ast
from pathlib import Path
from typing import Any

import pytest

from tenancy.models import Membership, Project
from tests.conftest import person, signed_in_client

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent

ADMIN_PAGES = {
    "/projects/acme/changes/": "Only admins of this project may see its admin changes.",
    "/projects/acme/approvers/": "Only admins of this project may change who decides its asks.",
    "/projects/acme/notifications/": "Only admins of this project may change its notification channels",
    "/projects/acme/run-retention/": "Only admins of this project may change how long its runs are kept.",
}


@pytest.mark.parametrize("path", list(ADMIN_PAGES))
def test_an_admin_page_is_403_for_other_members_404_outside_and_the_page_for_admins(
    path: str, project: Project, other_project: Project, django_user_model: Any
) -> None:
    for role in (Membership.Role.APPROVER, Membership.Role.AUDITOR):
        refused = signed_in_client(person(django_user_model, f"{role}-1", project, role)).get(path)
        assert refused.status_code == 403, (role, refused.status_code)
        assert ADMIN_PAGES[path] in refused.content.decode()
    outsider = person(django_user_model, "globex-admin", other_project, Membership.Role.ADMIN)
    assert signed_in_client(outsider).get(path).status_code == 404
    admin = person(django_user_model, "acme-admin", project, Membership.Role.ADMIN)
    assert signed_in_client(admin).get(path).status_code == 200


def test_no_view_checks_the_admin_role_itself() -> None:
    """An `if` on Membership.Role.ADMIN that raises PermissionDenied in a views module is a copy of
    the guard (a view may still ask the role to choose what to show)."""
    copies = []
    for path in [*sorted((ROOT / "ledger").rglob("*views.py")), ROOT / "tenancy" / "views.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.If) or "Role.ADMIN" not in ast.unparse(node.test):
                continue
            if any(isinstance(s, ast.Raise) and "PermissionDenied" in ast.unparse(s) for s in node.body):
                copies.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.test)}")
    assert not copies, "use footprint_site.pages.project_for_admin instead:\n" + "\n".join(copies)
