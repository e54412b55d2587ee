"""The bench's baselines must do what they claim; its timings are never asserted."""

import pytest
from django.db import connection

from runs import dispatch, queue
from runs.models import Episode, JournalEntry, Run
from simulator import bench, bench_sql
from tests.factories import OrganizationFactory, plan_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def ids() -> dict:
    return {"organization_id": OrganizationFactory().pk, "version_id": plan_version().pk}


def test_raw_cycle_claims_journals_closes_and_releases(ids):
    [run_id] = bench_sql.insert_runs_with_due_episodes(**ids, count=1)

    assert bench_sql.raw_cycle(run_id) == 1
    assert bench_sql.raw_cycle(run_id) == 0  # nothing left due

    episode = Episode.objects.get(run_id=run_id)
    assert (episode.status, episode.attempts) == ("done", 1)
    assert list(JournalEntry.objects.filter(run_id=run_id).values_list("seq", "episode_id")) == [(1, episode.pk)]
    run = Run.objects.get(pk=run_id)
    assert (run.lease_owner, run.lease_epoch) == (None, 2)


def test_dispatch_rows_are_due_or_sleeping_as_asked(ids):
    bench_sql.insert_dispatch_runs(**ids, count=3, due=True)
    bench_sql.insert_dispatch_runs(**ids, count=50, due=False)

    with connection.cursor() as cursor:
        cursor.execute(dispatch.DUE_RUNS_SQL, {**queue.mark_params(), "skip": [], "limit": 500})
        due = cursor.fetchall()

    assert len(due) == 3
    assert Run.objects.filter(status="waiting", next_wake_at__isnull=False).count() == 50


def test_table_shows_ratios_and_misses():
    figures = [bench.Figure("a", "1 s", "2 s target", 0.5, "< 1.00", True),
               bench.Figure("b", "4 ep/s", "80 ep/s raw", 0.05, ">= 0.33", False)]

    lines = bench.table(figures)

    assert lines[0].split()[:2] == ["figure", "measured"]
    assert lines[2].split()[-2:] == ["1.00", "ok"]
    assert "0.05" in lines[3] and lines[3].endswith("MISS")


def test_the_due_lag_drain_runs_each_queued_advance_task_like_a_worker(monkeypatch):
    from django_q.models import OrmQ

    from runs import queue
    from simulator import bench_lag
    from tests.factories import EpisodeFactory, RunFactory

    ran = []
    monkeypatch.setattr("runs.worker.advance_run", lambda run_id: ran.append(run_id))
    runs = [RunFactory() for _ in range(3)]
    for run in runs:
        EpisodeFactory(run=run)
        queue.enqueue_advance(run)

    assert bench_lag.drain_queue() == 3
    assert ran == [run.pk for run in runs]
    assert not OrmQ.objects.exists()
