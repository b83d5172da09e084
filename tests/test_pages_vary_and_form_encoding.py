"""Pages: partial views vary on HX-Request and HX-History-Restore-Request, and a form that is not
UTF-8 (urlencoded or multipart) is refused."""

import pytest
from django.test import Client

from ledger.asks.services import ask_open
from ledger.models import Ask
from tenancy.models import Project
from tests.conftest import ApiClient, fixture_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def declined_run(agent_client: ApiClient) -> str:
    events = fixture_events("b-middleware/events-declined.json")
    assert agent_client.ingest(events).status_code == 200
    return events[0]["meta"]["runId"]


def _consent_ask(project: Project) -> Ask:
    pause_data = {
        "toolCallId": "t3",
        "toolName": "transfer_funds",
        "ask": {"question": "Approve a transfer of 2500 EUR to ACC-900?", "middleware": "four-eyes"},
    }
    ask, _ = ask_open(
        project=project,
        run_id="run-review-1",
        pause_data=pause_data,
        key=None,
        session_id=None,
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
    )
    return ask


def test_integrity_panel_varies_on_hx_request(auditor_client: Client, project: Project, declined_run: str) -> None:
    """GET .../integrity/ answers the #integrity fragment to htmx (the panel's 1 s poll) and the whole
    run page otherwise, at one URL: like every other page with a partial it must say
    `Vary: HX-Request`, or a cache (the browser's back button, a proxy) serves the fragment as the page."""
    url = f"/projects/{project.slug}/runs/{declined_run}/integrity/"
    fragment = auditor_client.get(url, headers={"HX-Request": "true"})
    page = auditor_client.get(url)

    assert fragment.status_code == page.status_code == 200
    assert b"<html" not in fragment.content  # two representations at one URL
    assert b"<html" in page.content
    assert "HX-Request" in page.get("Vary", "")
    assert "HX-Request" in fragment.get("Vary", "")


@pytest.mark.parametrize(
    "path",
    ["/", "/runs/", "{run}/", "{run}/events/", "{run}/tool-calls/", "{run}/integrity/", "/inbox/", "/refusals/",
     "/audit-bundles/", "{project}/artifacts/"],
)  # fmt: skip
def test_pages_with_a_partial_vary_on_the_history_restore_header_too(
    approver_client: Client, project: Project, declined_run: str, path: str
) -> None:
    """htmx restores history it has no copy of with HX-Request *and* HX-History-Restore-Request, and
    gets the whole page (`wants_partial`); a cache keyed on HX-Request alone would hand that page
    to the next swap, or the swap's fragment to the restore."""
    url = path.format(project=f"/projects/{project.slug}", run=f"/projects/{project.slug}/runs/{declined_run}")
    restore = approver_client.get(url, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})

    assert restore.status_code == 200, (url, restore.status_code)
    assert b"<html" in restore.content
    varies = {name.strip().lower() for name in restore.get("Vary", "").split(",")}
    assert {"hx-request", "hx-history-restore-request"} <= varies, (url, restore.get("Vary"))


def _multipart(fields: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "review-boundary-7f3a"
    parts = b"".join(
        b"--"
        + boundary.encode()
        + b'\r\nContent-Disposition: form-data; name="'
        + name.encode()
        + b'"\r\n\r\n'
        + value
        + b"\r\n"
        for name, value in fields
    )
    return parts + b"--" + boundary.encode() + b"--\r\n", f"multipart/form-data; boundary={boundary}"


def test_a_multipart_decision_whose_note_is_not_utf8_is_refused_and_decides_nothing(
    approver_client: Client, project: Project
) -> None:
    """Form data that is not UTF-8 is refused rather than stored as U+FFFD, multipart as urlencoded:
    else the decision is chained, for ever, with a note the approver never wrote."""
    ask = _consent_ask(project)
    body, content_type = _multipart([("decision", b"decline"), ("note", b"no PO \xff\xfe on file")])

    response = approver_client.post(f"/asks/{ask.pk}/decide/", body, content_type=content_type)

    ask.refresh_from_db()
    assert (ask.status, ask.note) == (Ask.Status.OPEN, None), f"decided with note {ask.note!r}"
    assert response.status_code == 400
