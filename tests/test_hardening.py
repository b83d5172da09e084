"""Production settings pass Django's deployment checklist; responses carry the security headers."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_check_deploy_is_clean_under_production_settings():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env |= {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(60),
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_pages_carry_csp_nosniff_and_frame_denial(client):
    response = client.get("/accounts/login/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_session_and_csrf_cookies_are_httponly_and_samesite(client, settings, django_user_model):
    django_user_model.objects.create_user(username="u", password="pw-u")
    page = client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    response = client.post("/accounts/login/", {"username": "u", "password": "pw-u", "csrfmiddlewaretoken": token})
    session = response.cookies["sessionid"]
    assert session["httponly"]
    assert session["samesite"] == "Lax"
    assert page.cookies["csrftoken"]["samesite"] == "Lax"
