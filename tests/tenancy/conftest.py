"""People and things the admin-change tests act on: an admin of `project`, a superuser, an artifact."""

from typing import Any

import pytest
from django.test import Client

from artifacts.models import ArtifactStore
from artifacts.scopes import Scope
from artifacts.services import PutInput, artifact_put, store_for_project
from tenancy.models import AdminChange, Membership, Project
from tests.conftest import person, signed_in_client


@pytest.fixture
def admin_user(django_user_model: Any, project: Project) -> Any:
    return person(django_user_model, "ada", project, Membership.Role.ADMIN)


@pytest.fixture
def admin_client(admin_user: Any) -> Client:
    return signed_in_client(admin_user)


@pytest.fixture
def superuser(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")


@pytest.fixture
def superuser_client(superuser: Any) -> Client:
    return signed_in_client(superuser)


@pytest.fixture
def store(project: Project) -> ArtifactStore:
    return store_for_project(project=project)


def put_artifact(store: ArtifactStore, value: str = "evidence") -> str:
    spec = PutInput(kind="note", media_type="text/plain", payload={"shape": "text", "value": value})
    meta, _ = artifact_put(store=store, scope=Scope("t", "p", "c1"), spec=spec)
    return str(meta["ref"])


def changes(project: Project | None = None) -> list[AdminChange]:
    rows = AdminChange.objects.order_by("pk")
    return list(rows.filter(project=project) if project is not None else rows)
