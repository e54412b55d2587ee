"""Cluster heartbeats: stamps around tasks, and what counts as a stalled cluster."""

from datetime import timedelta

import pytest
from django.db import connection
from django_q.tasks import async_task

from runs import heartbeats
from runs.models import ClusterHeartbeat
from tests.commit_settings import left_by, statements_run, synchronous_commit

pytestmark = pytest.mark.django_db

STALL = timedelta(seconds=60)


def _sql(statement: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _age_cluster(cluster: str, *, seconds: int) -> None:
    """Move every stamp of the cluster `seconds` into the past."""
    _sql("UPDATE runs_clusterheartbeat SET started_at = started_at - make_interval(secs => %s),"
         " ready_at = ready_at - make_interval(secs => %s),"
         " last_task_started_at = last_task_started_at - make_interval(secs => %s),"
         " last_task_finished_at = last_task_finished_at - make_interval(secs => %s) WHERE cluster = %s",
         [seconds, seconds, seconds, seconds, cluster])


def _queue_task(*, waited_seconds: int, taken: bool = False) -> None:
    async_task("runs.tasks.dispatch_due")
    # The broker's lock: the enqueue time, or once taken, the time taken plus Q_CLUSTER["retry"].
    lock = "statement_timestamp() - make_interval(secs => %s)"
    if taken:
        lock += " + make_interval(secs => 360)"
    _sql(f"UPDATE django_q_ormq SET lock = {lock} WHERE id = (SELECT max(id) FROM django_q_ormq)",  # noqa: S608
         [waited_seconds])


def test_a_task_is_stamped_started_and_finished_even_when_it_fails():
    with pytest.raises(RuntimeError), heartbeats.beat("host:1"):
        row = ClusterHeartbeat.objects.get(cluster="host:1")
        assert row.in_flight == 1 and row.last_task_started_at and row.last_task_finished_at is None
        raise RuntimeError("the task failed")
    row = ClusterHeartbeat.objects.get(cluster="host:1")
    assert row.in_flight == 0
    assert row.last_task_finished_at >= row.last_task_started_at


def test_tasks_run_by_the_runtime_stamp_this_process_cluster(settings):
    from runs import tasks

    settings.LUCIA_WORKER_CLUSTER = "supervised-1"
    tasks.dispatch_due()
    assert ClusterHeartbeat.objects.get(cluster="supervised-1").last_task_finished_at is not None


def test_registering_a_new_qcluster_resets_its_start_and_in_flight_count():
    with pytest.raises(RuntimeError), heartbeats.beat("c"):
        _sql("UPDATE runs_clusterheartbeat SET in_flight = 3 WHERE cluster = 'c'", [])
        raise RuntimeError
    _age_cluster("c", seconds=600)
    heartbeats.register("c", pid=4242)
    row = ClusterHeartbeat.objects.get(cluster="c")
    assert (row.pid, row.in_flight) == (4242, 0)
    assert row.started_at > row.last_task_finished_at


def test_a_cluster_without_waiting_work_is_never_stalled():
    heartbeats.register("c", pid=1)
    heartbeats.worker_ready("c")
    _age_cluster("c", seconds=3600)
    _queue_task(waited_seconds=5)  # queued, but not for long yet
    assert heartbeats.stall_reason("c", stall_after=STALL) is None


def test_waiting_work_and_no_progress_past_the_stall_time_is_a_stall():
    heartbeats.register("c", pid=1)
    heartbeats.worker_ready("c")
    with heartbeats.beat("c"):
        pass
    _queue_task(waited_seconds=120, taken=True)  # taken by the wedged cluster's pusher, never run
    assert heartbeats.stall_reason("c", stall_after=STALL) is None  # a task finished just now

    _age_cluster("c", seconds=90)
    reason = heartbeats.stall_reason("c", stall_after=STALL)
    assert reason.startswith("1 queued task(s) waited over 60s and no task started or finished for 9")


def test_a_long_task_in_flight_within_the_q_timeout_is_not_a_stall(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 300}
    heartbeats.register("c", pid=1)
    heartbeats.worker_ready("c")
    _sql("UPDATE runs_clusterheartbeat SET in_flight = 1, last_task_started_at = statement_timestamp()"
         " WHERE cluster = 'c'", [])
    _queue_task(waited_seconds=120)
    _age_cluster("c", seconds=200)
    assert heartbeats.stall_reason("c", stall_after=STALL) is None

    _age_cluster("c", seconds=200)  # now past the q timeout: that task is dead, not slow
    assert heartbeats.stall_reason("c", stall_after=STALL) is not None


def test_a_booting_cluster_is_given_time_then_restarted_if_no_worker_came_up():
    heartbeats.register("c", pid=1)
    _queue_task(waited_seconds=120)
    _age_cluster("c", seconds=30)
    assert heartbeats.stall_reason("c", stall_after=timedelta(seconds=5)) is None  # still booting

    _age_cluster("c", seconds=60)
    assert heartbeats.stall_reason("c", stall_after=timedelta(seconds=5)) == (
        "no worker came up 90s after qcluster started")


def test_a_worker_coming_up_marks_the_cluster_booted_until_a_new_qcluster_starts():
    heartbeats.register("c", pid=1)
    heartbeats.worker_ready("c")
    assert not heartbeats.progress("c", stall_after=STALL).booting
    heartbeats.register("c", pid=2)
    assert heartbeats.progress("c", stall_after=STALL).booting


def test_a_late_registration_still_counts_workers_that_came_up_since_the_qcluster_started():
    heartbeats.register("c", pid=1)
    _age_cluster("c", seconds=600)  # an old qcluster's stamps
    heartbeats.worker_ready("c")  # the new qcluster's worker, up before the supervisor could register it
    heartbeats.register("c", pid=2, running_for=30)
    assert not heartbeats.progress("c", stall_after=STALL).booting


def _stamps(call) -> list[tuple[str, dict]]:
    """The upserts of the cluster's row that `call` ran, with their parameters."""
    return statements_run(call, picked=lambda sql: "INSERT INTO runs_clusterheartbeat" in sql)


@pytest.mark.django_db(transaction=True)
def test_a_task_s_stamps_in_their_own_transactions_commit_without_waiting_for_the_disk_a_ready_stamp_waits():
    def task():
        with heartbeats.beat("own"):
            pass

    stamps = _stamps(task) + _stamps(lambda: heartbeats.worker_ready("own"))

    assert synchronous_commit() == "on"  # for their own transactions only
    row = ClusterHeartbeat.objects.get(cluster="own")
    assert row.in_flight == 0 and row.last_task_finished_at and row.ready_at
    # What each left its transaction with, run again (and rolled back): the task's two, then the ready stamp.
    assert [left_by(sql, params) for sql, params in stamps] == ["off", "off", "on"]


def test_a_task_s_stamps_in_a_caller_s_transaction_leave_its_commit_as_the_caller_chose():
    with heartbeats.beat("inside"):  # the caller's transaction: the test's own (pytest-django's)
        pass
    assert synchronous_commit() == "on"
    assert ClusterHeartbeat.objects.get(cluster="inside").in_flight == 0
