from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import Schedule

from runs import dispatch, queue, tasks
from runs.models import Episode, EpisodeStatus, Escalation, Run, RunStatus
from tests.factories import EpisodeFactory, RunFactory
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db


def _lease(run: Run, *, seconds: int, epoch: int = 1) -> None:
    """Give the run a lease that expires `seconds` from now (negative: already expired), on the DB clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET lease_owner = 'w', lease_epoch = %s,"
            " lease_expires_at = now() + make_interval(secs => %s) WHERE id = %s",
            [epoch, seconds, run.pk],
        )


def _run_due(minutes_ago: int = 1, **fields) -> Run:
    run = RunFactory(**fields)
    EpisodeFactory(run=run, due_at=timezone.now() - timedelta(minutes=minutes_ago))
    return run


def test_dispatch_enqueues_only_due_real_runs_without_a_live_lease():
    due = _run_due(minutes_ago=5)
    due_expired_lease = _run_due(minutes_ago=1)
    _lease(due_expired_lease, seconds=-10)
    leased = _run_due()
    _lease(leased, seconds=60)
    sleeping = RunFactory()
    EpisodeFactory(run=sleeping, due_at=timezone.now() + timedelta(days=3))
    _run_due(sim=True)
    ended = _run_due()
    Run.objects.filter(pk=ended.pk).update(status=RunStatus.COMPLETED)
    done = RunFactory()
    EpisodeFactory(run=done, status=EpisodeStatus.DONE, due_at=timezone.now() - timedelta(days=1))

    assert dispatch.dispatch_due() == 2
    assert queued_run_ids() == [due.pk, due_expired_lease.pk]  # longest-waiting first


def test_dispatch_enqueues_a_run_once_however_many_episodes_are_due():
    run = _run_due()
    EpisodeFactory(run=run, due_at=timezone.now() - timedelta(minutes=2))
    assert dispatch.dispatch_due(limit=10) == 1


def test_dispatch_uses_the_due_episode_index_not_a_scan_of_sleeping_runs():
    # Sleeping runs have queued episodes due later; the range on the partial index skips them.
    for _ in range(30):
        EpisodeFactory(due_at=timezone.now() + timedelta(days=7))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_episode")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + dispatch.DUE_RUNS_SQL, [500])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "episode_due" in plan, plan


def test_the_reaper_requeues_an_episode_whose_worker_died_and_fences_the_zombie():
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    _lease(run, seconds=-5, epoch=1)

    assert dispatch.reap_expired() == 1

    episode = Episode.objects.get(pk=episode.pk)
    assert (episode.status, episode.attempts) == (EpisodeStatus.QUEUED, 1)
    assert "expired" in episode.error
    run = Run.objects.get(pk=run.pk)
    assert (run.lease_epoch, run.lease_owner) == (2, None)  # the reaper claimed (fencing epoch 1) and released
    assert queued_run_ids() == [run.pk]


def test_the_reaper_fails_and_escalates_past_the_attempt_limit(settings):
    settings.LUCIA_EPISODE_MAX_ATTEMPTS = 2
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=2, lease_epoch=1)
    _lease(run, seconds=-5, epoch=1)

    assert dispatch.reap_expired() == 1

    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.FAILED
    escalation = Escalation.objects.get(run=run)
    assert (escalation.kind, escalation.episode_id) == ("stuck", episode.pk)
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN
    assert queued_run_ids() == []


def test_the_reaper_leaves_episodes_under_a_live_lease_alone():
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    _lease(run, seconds=60, epoch=1)
    assert dispatch.reap_expired() == 0
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.RUNNING
    assert Run.objects.get(pk=run.pk).lease_epoch == 1


def test_an_enqueue_in_a_rolled_back_transaction_leaves_no_queue_row():
    run = RunFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue_advance(run)
        assert queued_run_ids() == [run.pk]
        raise RuntimeError("rollback")
    assert queued_run_ids() == []


def test_the_dispatch_task_reaps_then_enqueues():
    run = RunFactory()
    EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    _lease(run, seconds=-5, epoch=1)
    # Reaped episodes keep their due time, so the same pass dispatches them (the reaper already enqueued once).
    assert tasks.dispatch_due() == {"reaped": 1, "enqueued": 1}


def test_the_dispatch_schedule_exists_once_and_runs_every_minute():
    tasks.ensure_schedules()
    schedule = Schedule.objects.get(name=tasks.DISPATCH_SCHEDULE)
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "runs.tasks.dispatch_due", Schedule.MINUTES, 1, -1)
    assert tasks.last_dispatch_at() is None  # the cluster has not fired it yet
