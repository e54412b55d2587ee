import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import Schedule

from runs import dispatch, queue, tasks
from runs.models import EpisodeStatus, Run, RunStatus
from simulator import bench_copies
from tests.factories import EpisodeFactory, RunFactory
from tests.runs import loop_helpers as h
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db


def _run_due(minutes_ago: int = 1, **fields) -> Run:
    run = RunFactory(**fields)
    EpisodeFactory(run=run, due_at=timezone.now() - timedelta(minutes=minutes_ago))
    return run


def test_dispatch_enqueues_only_due_real_runs_without_a_live_lease():
    due = _run_due(minutes_ago=5)
    due_expired_lease = _run_due(minutes_ago=1)
    h.hold_lease(due_expired_lease, seconds=-10)
    leased = _run_due()
    h.hold_lease(leased, seconds=60)
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
    assert dispatch.dispatch_due(batch=10) == 1


def test_dispatch_uses_the_due_episode_index_not_a_scan_of_sleeping_runs():
    # Sleeping runs have queued episodes due later; the range on the partial index skips them.
    for _ in range(30):
        EpisodeFactory(due_at=timezone.now() + timedelta(days=7))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_episode")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + dispatch.DUE_RUNS_SQL, {**queue.mark_params(), "skip": [], "limit": 500})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "episode_due" in plan, plan


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
    h.hold_lease(run, seconds=-5, epoch=1)
    # The reaper enqueued the run; the dispatch that follows finds that task waiting and adds none.
    assert tasks.dispatch_due() == {"reaped": 1, "enqueued": 0}
    assert queued_run_ids() == [run.pk]


def test_a_failing_reap_pass_still_dispatches_due_runs(monkeypatch):
    run = RunFactory()
    EpisodeFactory(run=run, due_at=timezone.now() - timedelta(seconds=5))

    def reap_pass_fails():
        raise RuntimeError("orphan query failed")

    monkeypatch.setattr(dispatch, "reap_expired", reap_pass_fails)
    assert tasks.dispatch_due() == {"reaped": 0, "enqueued": 1}
    assert queued_run_ids() == [run.pk]


def test_the_dispatch_schedule_exists_once_and_runs_every_minute():
    tasks.ensure_schedules()
    schedule = Schedule.objects.get(name=tasks.DISPATCH_SCHEDULE)
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "runs.tasks.dispatch_due", Schedule.MINUTES, 1, -1)


def _mark_age(run: Run, *, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET advance_enqueued_at = now() - make_interval(secs => %s) WHERE id = %s",
                       [seconds, run.pk])


def test_dispatch_claims_batch_after_batch_until_nothing_is_due():
    runs = [_run_due() for _ in range(25)]
    assert dispatch.dispatch_due(batch=10) == 25
    assert sorted(queued_run_ids()) == sorted(run.pk for run in runs)


def test_dispatch_never_queues_a_second_task_behind_one_still_waiting():
    run = _run_due()
    assert dispatch.dispatch_due() == 1
    assert dispatch.dispatch_due() == 0
    queue.enqueue_advance(Run.objects.get(pk=run.pk))  # an event for the run: the waiting task will drain it
    assert queued_run_ids() == [run.pk]
    assert Run.objects.get(pk=run.pk).advance_enqueued_at is not None


def test_a_task_that_started_lets_the_run_be_queued_again():
    run = _run_due()
    dispatch.dispatch_due()
    queue.mark_started(run.pk)
    assert Run.objects.get(pk=run.pk).advance_enqueued_at is None
    assert dispatch.dispatch_due() == 1
    assert queued_run_ids() == [run.pk, run.pk]


def test_a_task_lost_before_it_cleared_its_mark_is_replaced_at_the_next_dispatch():
    from django_q.models import OrmQ

    run = _run_due()
    assert dispatch.dispatch_due() == 1
    # The worker took the task and failed before clearing the mark (the database went away under it):
    # django-q2 acknowledged it, so no queue row is left behind the mark.
    OrmQ.objects.all().delete()
    assert Run.objects.get(pk=run.pk).advance_enqueued_at is not None

    assert dispatch.dispatch_due() == 1
    assert queued_run_ids() == [run.pk]


def test_a_pass_claims_a_run_once_even_when_its_mark_looks_lost(monkeypatch):
    # Whatever the clocks say, every fresh mark looks unbacked by a queue row here.
    monkeypatch.setattr(queue, "mark_params",
                        lambda: {"stale_secs": 420, "backed_secs": -10**6, "now": timezone.now()})
    run = _run_due()

    assert dispatch.dispatch_due(budget_s=5) == 1
    assert queued_run_ids() == [run.pk]


def test_a_mark_backed_by_a_task_another_worker_has_taken_still_holds_the_run_back():
    from django_q.models import OrmQ

    _run_due()
    dispatch.dispatch_due()
    OrmQ.objects.update(lock=timezone.now() + timedelta(seconds=360))  # taken: lock = taken + retry

    assert dispatch.dispatch_due() == 0


def test_a_mark_older_than_the_q2_retry_no_longer_holds_the_run_back(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "retry": 100}
    from django_q.models import OrmQ

    fresh, stale = _run_due(), _run_due(minutes_ago=2)
    queue.enqueue_advance(fresh)
    OrmQ.objects.update(lock=timezone.now() + timedelta(seconds=100))  # fresh's task, taken: lock = taken + retry
    _mark_age(fresh, seconds=30)
    _mark_age(stale, seconds=161)  # retry + 60 s: its task (or queue row) is lost
    assert dispatch.dispatch_due() == 1
    assert queued_run_ids() == [fresh.pk, stale.pk]


def test_one_failing_enqueue_never_blocks_the_others(monkeypatch):
    bad, good = _run_due(minutes_ago=3), _run_due(minutes_ago=2)
    enqueue = queue._enqueue

    def failing(run_id):
        if run_id == bad.pk:
            raise RuntimeError("broker refused")
        enqueue(run_id)

    monkeypatch.setattr(queue, "_enqueue", failing)
    assert dispatch.dispatch_due() == 1
    assert queued_run_ids() == [good.pk]
    # Not marked as waiting: the next pass tries it again.
    assert Run.objects.get(pk=bad.pk).advance_enqueued_at is None
    monkeypatch.setattr(queue, "_enqueue", enqueue)
    assert dispatch.dispatch_due() == 1
    assert queued_run_ids() == [good.pk, bad.pk]


def test_a_spent_time_budget_ends_the_pass_after_one_batch():
    for _ in range(5):
        _run_due()
    assert dispatch.dispatch_due(batch=2, budget_s=0) == 2


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_at_once_queue_each_run_exactly_once(monkeypatch):
    runs = [_run_due() for _ in range(40)]
    first_claimed, second_done = threading.Event(), threading.Event()
    enqueue_marked = queue.enqueue_marked
    results, errors = {}, []

    def slow_enqueue(run_ids):
        # The first dispatcher holds its claimed rows (uncommitted) while the second one runs in full.
        if threading.current_thread().name == "first" and not first_claimed.is_set():
            first_claimed.set()
            assert second_done.wait(30)
        return enqueue_marked(run_ids)

    monkeypatch.setattr(queue, "enqueue_marked", slow_enqueue)

    def dispatcher(name, wait_for=None, then=None):
        try:
            if wait_for is not None:
                assert wait_for.wait(30)
            results[name] = dispatch.dispatch_due(batch=25)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            if then is not None:
                then.set()
            connection.close()

    threads = [threading.Thread(target=dispatcher, args=("first",), name="first"),
               threading.Thread(target=dispatcher, args=("second", first_claimed, second_done), name="second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    queued = queued_run_ids()
    assert sorted(queued) == sorted(run.pk for run in runs)  # every due run once, none twice
    # The second finished while the first still held its batch (skipped, not waited for); the first went on.
    assert results["first"] + results["second"] == 40
    assert dispatch.dispatch_due() == 0


@pytest.mark.django_db(transaction=True)
def test_dispatchers_racing_freely_queue_each_run_once():
    runs = [_run_due() for _ in range(120)]
    start = threading.Barrier(3)
    errors = []

    def dispatcher():
        try:
            start.wait(30)
            dispatch.dispatch_due(batch=7)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert sorted(queued_run_ids()) == sorted(run.pk for run in runs)


# Its rows are truncated after it (a rolled-back insert would leave the table's pages for later plan tests).
@pytest.mark.django_db(transaction=True)
def test_dispatch_walks_the_due_episode_index_on_a_database_with_a_history():
    """A young database: each run has two episodes done (due in the past) and one queued. The planner, multiplying
    the odds of 'queued' by those of 'due by now', expects thousands of due episodes where 50 are. Planned with
    real statistics, the query still walks episode_due in due order (grouped first, it read every episode)."""
    template = RunFactory(status=RunStatus.WAITING)
    with connection.cursor() as cursor:
        run_ids = bench_copies.copy_runs(cursor, template.pk, count=10_000)
        cursor.execute(
            "INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, created_at,"
            " error) SELECT r, s, 'followup', json_build_object('text', repeat('x', 200)), 'd' || s,"
            " CASE WHEN s = 3 THEN 'queued' ELSE 'done' END,"
            " CASE WHEN s = 3 THEN now() + r * interval '1 minute' ELSE now() - s * interval '1 day' END, 0, now(), ''"
            " FROM unnest(%s::bigint[]) r, generate_series(1, 3) s", [run_ids])
        cursor.execute("UPDATE runs_episode SET due_at = now() - interval '1 minute' WHERE run_id = ANY(%s)"
                       " AND status = 'queued'", [run_ids[:50]])
        cursor.execute("ANALYZE runs_episode")
        cursor.execute("ANALYZE runs_run")
        cursor.execute("EXPLAIN " + dispatch.DUE_RUNS_SQL, {**queue.mark_params(), "skip": [], "limit": 500})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "episode_due" in plan and "Seq Scan on runs_episode" not in plan, plan
    assert dispatch.dispatch_due() == 50
