"""The run page's operations through the Studio: each moves the run through its domain module."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection

from runs import clock, dispatch, worker
from runs.models import Episode, EpisodeStatus, Escalation, JournalEntry, Run, RunStatus
from tests.factories import EpisodeFactory, EscalationFactory, OrganizationFactory, RunFactory, TaskFactory
from tests.runs import fakes
from tests.studio_users import staff_user

pytestmark = pytest.mark.django_db

OPERATE = ("runs.view_run", "runs.change_run")


@pytest.fixture
def acme():
    return OrganizationFactory(name="Acme", slug="acme", default_timezone="Europe/Paris")


@pytest.fixture
def ops(client, acme):
    client.force_login(staff_user("ops", perms=OPERATE, organizations=[acme]))
    return client


def _sleeping(organization, *, days: int = 2) -> tuple[Run, Episode]:
    """A run waiting for its next follow-up, `days` from now."""
    run = RunFactory(organization=organization, status=RunStatus.WAITING, wake_when="followup:1")
    followup = EpisodeFactory(run=run, kind="followup", payload={"step": 1, "channel": "email"},
                              due_at=clock.wall_now() + timedelta(days=days))
    Run.objects.filter(pk=run.pk).update(next_wake_at=followup.due_at)
    return run, followup


def _lease(run: Run, *, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_owner = 'worker-7', lease_epoch = lease_epoch + 1,"
                       " lease_expires_at = now() + make_interval(secs => %s) WHERE id = %s", [seconds, run.pk])


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


def test_wake_now_makes_the_run_due_and_the_dispatcher_picks_it(ops, acme):
    run, followup = _sleeping(acme)
    assert dispatch.dispatch_due() == 0

    response = ops.post(f"/admin/runs/run/{run.pk}/wake/", follow=True)

    assert "is due now" in _messages(response)[0]
    assert Episode.objects.get(pk=followup.pk).due_at <= clock.wall_now()
    assert Run.objects.get(pk=run.pk).next_wake_at <= clock.wall_now()
    assert dispatch.dispatch_due() == 1 and fakes.queued_run_ids() == [run.pk]
    note = JournalEntry.objects.get(run=run)
    assert note.data["operation"] == "wake_now" and note.data["by"]["user_id"] == response.context["user"].pk


def test_wake_now_never_writes_under_a_live_lease(ops, acme):
    run, followup = _sleeping(acme)
    _lease(run, seconds=60)

    response = ops.post(f"/admin/runs/run/{run.pk}/wake/", follow=True)

    assert "is being advanced by worker-7" in _messages(response)[0]
    assert Episode.objects.get(pk=followup.pk).due_at == followup.due_at
    assert not JournalEntry.objects.filter(run=run).exists()


def test_wake_now_with_nothing_scheduled_says_to_post_an_event(ops, acme):
    run = RunFactory(organization=acme, status=RunStatus.WAITING, wake_when="reply:email")

    response = ops.post(f"/admin/runs/run/{run.pk}/wake/", follow=True)

    assert "post an event" in _messages(response)[0]


def test_the_next_contact_is_rescheduled_in_the_organizations_timezone(ops, acme):
    run, followup = _sleeping(acme)
    wanted = (clock.wall_now() + timedelta(days=5)).astimezone(ZoneInfo("Europe/Paris")).replace(
        hour=10, minute=30, second=0, microsecond=0)

    response = ops.post(f"/admin/runs/run/{run.pk}/reschedule/", {"at": wanted.strftime("%Y-%m-%dT%H:%M")},
                        follow=True)

    assert "is now due" in _messages(response)[0]
    assert Episode.objects.get(pk=followup.pk).due_at == wanted
    assert Run.objects.get(pk=run.pk).next_wake_at == wanted
    assert JournalEntry.objects.get(run=run).data["operation"] == "reschedule_next_contact"


def test_rescheduling_into_the_past_is_refused(ops, acme):
    run, followup = _sleeping(acme)

    response = ops.post(f"/admin/runs/run/{run.pk}/reschedule/", {"at": "2020-01-01T09:00"}, follow=True)

    assert "has passed" in _messages(response)[0]
    assert Episode.objects.get(pk=followup.pk).due_at == followup.due_at


def test_an_event_posted_from_the_studio_wakes_the_run(ops, acme):
    run, followup = _sleeping(acme)

    response = ops.post(f"/admin/runs/run/{run.pk}/event/", {"kind": "event", "text": "invoice paid"}, follow=True)

    assert "event recorded as episode #2" in _messages(response)[0]
    event = Episode.objects.get(run=run, kind="event")
    assert (event.payload["text"], event.payload["via"], event.status) == ("invoice paid", "admin", "queued")
    assert Run.objects.get(pk=run.pk).status == RunStatus.ACTIVE


def test_an_inbound_event_from_a_stranger_is_refused(ops, acme):
    run, _ = _sleeping(acme)

    response = ops.post(f"/admin/runs/run/{run.pk}/event/",
                        {"kind": "inbound", "text": "here it is", "sender": "someone@example.com",
                         "channel": "email"}, follow=True)

    assert "is not a contact" in _messages(response)[0]
    assert not Episode.objects.filter(run=run, kind="inbound").exists()


def test_cancel_asks_for_a_reason_and_records_it(ops, acme):
    run, _ = _sleeping(acme)
    url = f"/admin/runs/run/{run.pk}/cancel/"

    asked = ops.get(url)
    refused = ops.post(url, {"reason": "  "})
    assert asked.status_code == 200 and b'id="confirm-cancel"' in asked.content
    assert refused.status_code == 200 and b"Give a reason" in refused.content
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING

    response = ops.post(url, {"reason": "the vendor closed"}, follow=True)

    cancelled = Run.objects.get(pk=run.pk)
    assert (cancelled.status, cancelled.outcome) == (RunStatus.CANCELLED, "the vendor closed")
    assert cancelled.cancelled_by == response.context["user"]
    assert "Cancelled run" in _messages(response)[0]


def _failed_with_question(organization) -> tuple[Run, Episode, Escalation]:
    run = RunFactory(organization=organization, status=RunStatus.WAITING_HUMAN)
    TaskFactory(run=run)
    failed = EpisodeFactory(run=run, kind="start", dedupe_key="start", payload={"note": "first"},
                            status=EpisodeStatus.FAILED, attempts=3, error="ModelError: 503",
                            due_at=clock.wall_now() - timedelta(hours=1), finished_at=clock.wall_now())
    question = EscalationFactory(run=run, kind="stuck", episode=failed, prompt="Episode #1 failed")
    Escalation.objects.filter(pk=question.pk).update(options=[{"name": "retry"}])
    Run.objects.filter(pk=run.pk).update(wake_when=f"human:{question.pk}")
    return run, failed, question


def test_retrying_a_failed_episode_answers_its_question_and_the_episode_runs_again(ops, acme, monkeypatch):
    run, failed, question = _failed_with_question(acme)
    loop, _ = fakes.install(monkeypatch)

    response = ops.post(f"/admin/runs/run/{run.pk}/retry/{failed.pk}/", follow=True)

    assert "runs again as #2" in _messages(response)[0]
    question.refresh_from_db()
    assert (question.status, question.answered_via) == ("answered", "admin")
    again = Episode.objects.get(run=run, seq=2)
    assert (again.kind, again.payload["note"], again.status) == ("start", "first", EpisodeStatus.QUEUED)
    assert fakes.queued_run_ids() == [run.pk]  # the answer woke the run (runs.events)
    assert worker.advance_run(run.pk, owner="w1") is True
    assert [seq for seq, _ in loop.calls] == [2]
    assert Episode.objects.get(pk=again.pk).status == EpisodeStatus.DONE


def test_a_failed_episode_without_an_open_question_is_recorded_again(ops, acme):
    run, failed, question = _failed_with_question(acme)
    Escalation.objects.filter(pk=question.pk).update(status="answered")

    ops.post(f"/admin/runs/run/{run.pk}/retry/{failed.pk}/")
    twice = ops.post(f"/admin/runs/run/{run.pk}/retry/{failed.pk}/", follow=True)  # a double click

    assert "already retried" in _messages(twice)[-1]
    again = Episode.objects.get(run=run, seq=2)
    assert (again.kind, again.dedupe_key) == ("start", f"retry:episode:{failed.pk}:1")
    assert Episode.objects.filter(run=run).count() == 2
    assert JournalEntry.objects.get(run=run).data["operation"] == "retry_episode"


def test_only_a_failed_episode_can_be_retried(ops, acme):
    run, followup = _sleeping(acme)

    response = ops.post(f"/admin/runs/run/{run.pk}/retry/{followup.pk}/", follow=True)

    assert "only a failed episode can be retried" in _messages(response)[0]
    assert Episode.objects.filter(run=run).count() == 1


def test_a_viewer_sees_the_run_but_no_operation_and_no_save(client, acme):
    run, followup = _sleeping(acme)
    client.force_login(staff_user("vic", perms=("runs.view_run",), organizations=[acme]))

    page = client.get(f"/admin/runs/run/{run.pk}/change/")

    assert page.status_code == 200
    assert b'id="run-status"' in page.content and b'id="run-timeline"' in page.content
    assert b'id="run-operations"' not in page.content and b'name="_save"' not in page.content
    for url, data in [(f"/admin/runs/run/{run.pk}/wake/", {}), (f"/admin/runs/run/{run.pk}/cancel/", {"reason": "x"}),
                      (f"/admin/runs/run/{run.pk}/reschedule/", {"at": "2031-01-01T10:00"}),
                      (f"/admin/runs/run/{run.pk}/event/", {"kind": "event", "text": "x"}),
                      (f"/admin/runs/run/{run.pk}/retry/{followup.pk}/", {})]:
        assert client.post(url, data).status_code == 403, url
    assert client.get(f"/admin/runs/run/{run.pk}/cancel/").status_code == 403
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING
    listing = client.post("/admin/runs/run/", {"action": "cancel_runs", "_selected_action": [run.pk],
                                               "confirmed": "yes", "reason": "x"})
    assert listing.status_code in (200, 302) and Run.objects.get(pk=run.pk).status == RunStatus.WAITING


def test_a_saved_run_page_changes_nothing(ops, acme):
    run, _ = _sleeping(acme)

    response = ops.post(f"/admin/runs/run/{run.pk}/change/", {"status": "cancelled", "goal": "rewritten"})

    assert response.status_code == 403
    assert (Run.objects.get(pk=run.pk).status, Run.objects.get(pk=run.pk).goal) == (RunStatus.WAITING,
                                                                                    "Collect the W-9")


def test_another_organizations_run_is_not_found(ops):
    theirs, followup = _sleeping(OrganizationFactory(slug="globex"))

    for url in (f"/admin/runs/run/{theirs.pk}/wake/", f"/admin/runs/run/{theirs.pk}/retry/{followup.pk}/"):
        assert ops.post(url).status_code == 404, url
    assert ops.get(f"/admin/runs/run/{theirs.pk}/cancel/").status_code == 404
    assert ops.get(f"/admin/runs/run/{theirs.pk}/timeline/").status_code == 404
    assert ops.get(f"/admin/runs/run/{theirs.pk}/change/").status_code == 302  # the admin's "not found" redirect
    assert Episode.objects.get(pk=followup.pk).due_at == followup.due_at


def test_the_timeline_of_a_missing_run_is_a_404_and_needs_view_permission(client, acme):
    run, _ = _sleeping(acme)
    client.force_login(staff_user("nobody", organizations=[acme]))
    assert client.get(f"/admin/runs/run/{run.pk}/timeline/").status_code == 403

    client.force_login(staff_user("root", superuser=True))
    assert client.get("/admin/runs/run/999999/timeline/").status_code == 404


def test_the_list_shows_leases_and_filters_runs_waiting_on_a_human(ops, acme):
    waiting = RunFactory(organization=acme, status=RunStatus.WAITING_HUMAN)
    old = EscalationFactory(run=waiting)
    Escalation.objects.filter(pk=old.pk).update(created_at=clock.wall_now() - timedelta(hours=6))
    recent = RunFactory(organization=acme, status=RunStatus.WAITING_HUMAN)
    EscalationFactory(run=recent)
    leased, _ = _sleeping(acme)
    _lease(leased, seconds=60)

    filtered = ops.get("/admin/runs/run/?waiting_human_hours=4")
    listing = ops.get("/admin/runs/run/").content.decode()

    assert [run.pk for run in filtered.context["cl"].result_list] == [waiting.pk]
    assert "worker-7" in listing and "Last heartbeat" in listing


def test_the_run_page_leads_with_status_and_timeline_and_collapses_the_plan(ops, acme):
    run, _ = _sleeping(acme)

    page = ops.get(f"/admin/runs/run/{run.pk}/change/").content.decode()

    assert page.index('id="run-status"') < page.index('id="run-operations"') < page.index('id="run-timeline"')
    assert page.index('id="run-timeline"') < page.index("Plan, inputs and state")
    assert 'class="module aligned collapse"' in page
    assert 'id="op-wake"' in page and 'id="op-cancel"' in page
