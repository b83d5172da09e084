"""Retention that stays verifiable: runs past their project's retention are archived as audit
bundles (which the framework's own verifier accepts), read back and checked, then removed with a
tombstone; held runs stay; the anchors still vouch for what remains and name a removal retention
did not make; pages show, check and hold.
"""

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from ledger.audits.integrity import chain_anchors_write
from ledger.audits.integrity_selectors import project_anchors_audit
from ledger.models import LedgerRetention, Run, RunHold, RunTombstone
from ledger.retention import archive, services
from ledger.retention.selectors import archive_check
from tenancy.models import AdminChange, Membership
from tenancy.services import UNNAMED, Actor
from tests.conftest import fixture_events, person, signed_in_client
from tests.ledger.test_verify_matches_framework import framework_verdicts

RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events


@pytest.fixture(autouse=True)
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.ARCHIVE_URL = (tmp_path / "archive").as_uri()
    return tmp_path / "archive"


@pytest.fixture
def old_run(agent_client: Any, project: Any) -> Run:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    Run.objects.filter(run_id=RUN_ID).update(last_event_at=timezone.now() - timedelta(days=40))
    return Run.objects.get(project=project, run_id=RUN_ID)


def _rows_of(run_pk: int) -> dict[str, int]:
    counts = {}
    with connection.cursor() as cur:
        for field in services.run_foreign_keys():
            cur.execute(f'SELECT count(*) FROM "{field.model._meta.db_table}" WHERE "{field.column}" = %s', [run_pk])  # noqa: S608
            counts[field.model.__name__] = cur.fetchone()[0]
    return counts


# --- the policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("days", [0, -3, LedgerRetention.MAX_DAYS + 1])
def test_retention_out_of_range_is_refused_with_the_field_named_and_nothing_written(project: Any, days: int) -> None:
    with pytest.raises(ValueError, match=r"^keep_days must be a whole number of days from 1 to 36500"):
        services.run_retention_set(project=project, keep_days=days, actor=UNNAMED)
    assert not LedgerRetention.objects.exists()
    assert not AdminChange.objects.exists()


def test_each_retention_change_is_recorded_once(project: Any) -> None:
    services.run_retention_set(project=project, keep_days=30, actor=Actor.command("test"))
    services.run_retention_set(project=project, keep_days=30, actor=Actor.command("test"))  # no change
    services.run_retention_set(project=project, keep_days=None, actor=Actor.command("test"))
    changes = AdminChange.objects.filter(action=AdminChange.Action.RUN_RETENTION_CHANGED).order_by("pk")
    assert [(c.before, c.after) for c in changes] == [
        ({"keep_days": None}, {"keep_days": 30}),
        ({"keep_days": 30}, {"keep_days": None}),
    ]
    assert not LedgerRetention.objects.exists()


# --- the pass -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_past_retention_is_archived_checked_removed_and_tombstoned(
    old_run: Run, project: Any, archive_dir: Path
) -> None:
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    head, length = bytes(old_run.head_hash), old_run.chain_length

    outcome = services.runs_retention_pass()

    assert (outcome.removed, outcome.records, outcome.failed) == (1, length, 0)
    assert not Run.objects.filter(pk=old_run.pk).exists()
    assert set(_rows_of(old_run.pk).values()) == {0}  # every table's rows of the run are gone
    tombstone = RunTombstone.objects.get(project=project, run_id=RUN_ID)
    assert (bytes(tombstone.head_hash), tombstone.chain_length, tombstone.keep_days) == (head, length, 30)
    body = archive.archive_get(tombstone.archive_location)
    assert Path(tombstone.archive_location.removeprefix("file://")).is_relative_to(archive_dir)
    assert archive_check(tombstone=tombstone, body=body).valid
    # The archive is the framework's format: its own verifier accepts it, every record checked.
    (verdict,) = framework_verdicts([body.decode()])
    assert verdict == {"verdict": {"valid": True, "recordsChecked": length + 1}}


@pytest.mark.django_db(transaction=True)
def test_runs_within_retention_and_held_runs_stay(old_run: Run, project: Any, agent_client: Any) -> None:
    services.run_retention_set(project=project, keep_days=60, actor=UNNAMED)
    assert services.runs_retention_pass().removed == 0  # 40 days old, kept 60

    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    hold = services.run_hold_place(project=project, run_id=RUN_ID, reason="case 4411", actor=UNNAMED)
    assert services.runs_retention_pass().removed == 0
    assert Run.objects.filter(pk=old_run.pk).exists()

    services.run_hold_release(hold=hold, actor=UNNAMED)
    assert services.runs_retention_pass().removed == 1
    actions = list(AdminChange.objects.filter(target_type="run").order_by("pk").values_list("action", flat=True))
    assert actions == [AdminChange.Action.RUN_HOLD_PLACED, AdminChange.Action.RUN_HOLD_RELEASED]


def test_a_hold_needs_a_reason_and_an_existing_run(project: Any, old_run: Run) -> None:
    with pytest.raises(ValueError, match=r"^reason: "):
        services.run_hold_place(project=project, run_id=RUN_ID, reason="  ", actor=UNNAMED)
    with pytest.raises(ValueError, match=r"^run_id: project acme has no run 'nope'"):
        services.run_hold_place(project=project, run_id="nope", reason="case 1", actor=UNNAMED)
    assert not RunHold.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_held_for_two_cases_stays_until_both_release_it(old_run: Run, project: Any) -> None:
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    first = services.run_hold_place(project=project, run_id=RUN_ID, reason="case 1", actor=UNNAMED)
    second = services.run_hold_place(project=project, run_id=RUN_ID, reason="case 2", actor=UNNAMED)
    services.run_hold_release(hold=first, actor=UNNAMED)
    assert services.runs_retention_pass().removed == 0
    services.run_hold_release(hold=second, actor=UNNAMED)
    services.run_hold_release(hold=second, actor=UNNAMED)  # released once, recorded once
    assert services.runs_retention_pass().removed == 1
    assert AdminChange.objects.filter(action=AdminChange.Action.RUN_HOLD_RELEASED).count() == 2


@pytest.mark.django_db(transaction=True)
def test_an_archive_store_that_cannot_be_written_removes_nothing(
    old_run: Run, project: Any, settings: Any, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive directory should be")
    settings.ARCHIVE_URL = blocker.as_uri()
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)

    outcome = services.runs_retention_pass()

    assert (outcome.removed, outcome.failed) == (0, 1)
    assert Run.objects.filter(pk=old_run.pk).exists()
    assert not RunTombstone.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_pass_stopped_after_archiving_leaves_the_run_in_place(
    old_run: Run, project: Any, monkeypatch: pytest.MonkeyPatch, archive_dir: Path
) -> None:
    """A worker killed between the archive and the removal: the removal and its tombstone were one
    transaction, so neither happened; the next pass writes the archive again and removes the run."""
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)

    def killed(run: Run, **_: Any) -> None:
        raise SystemExit("worker killed")

    with monkeypatch.context() as patched:
        patched.setattr(services, "_delete_run_rows", killed)
        with pytest.raises(SystemExit):
            services.runs_retention_pass()
    assert Run.objects.filter(pk=old_run.pk).exists()
    assert not RunTombstone.objects.exists()

    assert services.runs_retention_pass().removed == 1
    assert len(list(archive_dir.rglob("*.audit.json"))) == 1


@pytest.mark.django_db(transaction=True)
def test_two_passes_at_once_remove_each_run_once(old_run: Run, project: Any) -> None:
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    barrier = threading.Barrier(2)
    outcomes = []

    def one_pass() -> None:
        barrier.wait()
        try:
            outcomes.append(services.runs_retention_pass())
        finally:
            connection.close()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(outcome.removed for outcome in outcomes) == 1
    assert RunTombstone.objects.count() == 1


# --- the anchors --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_anchors_accept_what_retention_removed_and_name_what_it_did_not(
    old_run: Run, project: Any, agent_client: Any
) -> None:
    other = [
        {**event, "meta": {**event["meta"], "runId": "run-deleted-by-hand"}}
        for event in fixture_events("a-run-recording/events.json")
    ]
    assert agent_client.ingest(other).status_code == 200
    chain_anchors_write()
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    assert services.runs_retention_pass().removed == 1
    assert project_anchors_audit(project=project).valid

    services._delete_run_rows(Run.objects.get(run_id="run-deleted-by-hand"))  # behind the server's back
    (problem,) = project_anchors_audit(project=project).problems
    assert problem == (
        "run 'run-deleted-by-hand' was anchored with 76 records and no longer exists, and retention did not "
        "remove it: it was deleted behind the server's back"
    )


# --- pages --------------------------------------------------------------------------------------


@pytest.fixture
def removed(old_run: Run, project: Any) -> RunTombstone:
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    services.runs_retention_pass()
    return RunTombstone.objects.get(run_id=RUN_ID)


def test_a_removed_runs_page_says_when_and_where_and_checks_the_stored_archive(
    removed: RunTombstone, auditor_client: Any
) -> None:
    answer = auditor_client.get(f"/projects/acme/runs/{RUN_ID}/", follow=True)
    assert answer.redirect_chain == [(f"/projects/acme/runs/{RUN_ID}/removed/", 302)]
    page = answer.content.decode()
    assert "archived and removed by the project" in page
    assert removed.archive_sha256 in page

    checked = auditor_client.post(f"/projects/acme/runs/{RUN_ID}/removed/", HTTP_HX_REQUEST="true").content.decode()
    assert "is this run's archive, unedited" in checked
    assert "77 records checked" in checked


def test_an_edited_archive_uploaded_is_named_as_such(removed: RunTombstone, auditor_client: Any) -> None:
    document = json.loads(archive.archive_get(removed.archive_location))
    document["records"][5]["payload"] = {"edited": True}
    upload = SimpleUploadedFile("archive.json", json.dumps(document).encode(), content_type="application/json")
    page = auditor_client.post(f"/projects/acme/runs/{RUN_ID}/removed/", {"archive": upload}).content.decode()
    assert "is not this run's archive as it was written" in page
    assert "these are not the archived bytes" in page
    assert "The framework&#x27;s verifier refuses it" in page


def test_another_projects_removed_run_is_a_404(removed: RunTombstone, outsider_client: Any) -> None:
    assert outsider_client.get(f"/projects/acme/runs/{RUN_ID}/removed/").status_code == 404
    assert outsider_client.get(f"/projects/acme/runs/{RUN_ID}/").status_code == 404


def test_holds_from_the_run_page_need_an_auditor_or_admin(
    old_run: Run, auditor_client: Any, approver_client: Any
) -> None:
    hold_url = f"/projects/acme/runs/{RUN_ID}/holds/"
    assert approver_client.post(hold_url, {"reason": "case 9"}).status_code == 403
    assert not RunHold.objects.exists()

    refused = auditor_client.post(hold_url, {"reason": ""}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 200  # htmx swaps only a 2xx: the line comes back with its refusal
    assert "reason: say why the run is held" in refused.content.decode()

    held = auditor_client.post(hold_url, {"reason": "case 9"}, HTTP_HX_REQUEST="true")
    assert held.status_code == 200
    assert "Held against retention" in held.content.decode()
    assert "case 9" in auditor_client.get(f"/projects/acme/runs/{RUN_ID}/").content.decode()

    hold = RunHold.objects.get()
    released = auditor_client.post(f"/projects/acme/runs/{RUN_ID}/holds/{hold.pk}/release/", HTTP_HX_REQUEST="true")
    assert "not held" in released.content.decode()
    assert RunHold.objects.get().released_by == "alice"

    refused_page = auditor_client.post(hold_url, {"reason": " "})  # no htmx: a page that says why
    assert refused_page.status_code == 422
    assert "The run was not held" in refused_page.content.decode()


def test_run_retention_is_set_by_admins_only(project: Any, auditor_client: Any, django_user_model: Any) -> None:
    assert auditor_client.get("/projects/acme/run-retention/").status_code == 403
    admin = signed_in_client(person(django_user_model, "dana", project, Membership.Role.ADMIN))
    refused = admin.post("/projects/acme/run-retention/", {"keep_days": "0"})
    assert refused.status_code == 422
    assert not LedgerRetention.objects.exists()
    assert admin.post("/projects/acme/run-retention/", {"keep_days": "90"}).status_code == 302
    assert LedgerRetention.objects.get(project=project).keep_days == 90
