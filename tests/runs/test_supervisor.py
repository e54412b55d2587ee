"""`runworkers`: a real qcluster under the supervisor, its workers SIGKILLed idle and busy.

Each test starts `manage.py runworkers` on the test database with one worker
and a short stall time, hurts the cluster, and polls the database (bounded) until
queued work has run again. Starting a cluster costs seconds, so scenarios that
need the same settings hurt one cluster in turn instead of starting one each.
"""

import os
import re
import signal
import time
from datetime import timedelta

import psutil
import pytest
from django.db import connection
from django_q.tasks import async_task

from runs import supervisor
from runs.models import ClusterHeartbeat, Episode, EpisodeStatus
from tests.runs import cluster_helpers as clusters


def _sql(statement: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.mark.django_db
def test_release_hands_back_rows_taken_by_a_dead_cluster_but_not_fresh_ones():
    for _ in range(3):
        async_task("runs.tasks.dispatch_due")
    old, fresh, waiting = [row[0] for row in _ids()]
    # Taken (lock = taken + retry 360 s) 30 s ago, 1 s ago; the third is still waiting.
    _sql("UPDATE django_q_ormq SET lock = statement_timestamp() + interval '330 seconds' WHERE id = %s", [old])
    _sql("UPDATE django_q_ormq SET lock = statement_timestamp() + interval '359 seconds' WHERE id = %s", [fresh])

    released = supervisor.release_orphaned_tasks(
        started_after=time.monotonic() - 20, stall_after=timedelta(seconds=5))

    assert released == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, lock <= statement_timestamp() FROM django_q_ormq ORDER BY id")
        assert cursor.fetchall() == [(old, True), (fresh, False), (waiting, True)]


def _ids() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM django_q_ormq ORDER BY id")
        return cursor.fetchall()


def _start_episode_done(run) -> bool:
    return Episode.objects.get(run=run, kind="start").status == EpisodeStatus.DONE


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cluster_wedged_by_a_killed_idle_worker_fails_healthz_is_restarted_and_runs_queued_work(
        supervised, client, settings):
    # One wedge, watched from both sides (it costs a cluster start and a stall each time it is made): /healthz/
    # goes 503 while the cluster is stuck, the supervisor restarts it, the work runs and health recovers by itself.
    settings.LUCIA_HEALTH_MAX_QUEUE_AGE = 2
    settings.LUCIA_HEALTH_MAX_DUE_LAG = 2
    # django-q2's own idle wait (the lock-free wait off): the upstream wedge, django-q2 issue #23.
    name, log = supervised(env={"LUCIA_Q_LOCK_FREE_WAIT": "false"})
    idle = clusters.worker_pid(name, log)
    assert clusters.wait_for(lambda: clusters.blocked_in(idle, "pipe_read"), seconds=10)  # holding the lock
    os.kill(idle, signal.SIGKILL)

    run = clusters.real_run()

    wedged = []
    assert clusters.wait_for(lambda: wedged.append(client.get("/healthz/")) or wedged[-1].status_code == 503,
                             seconds=20)
    problems = wedged[-1].json()["problems"]
    assert any(p.startswith("queue: the oldest of") for p in problems), problems
    assert any(p.startswith("due-lag: an episode due") for p in problems), problems

    assert clusters.wait_for(lambda: _start_episode_done(run), seconds=45), log.read_text()[-4000:]
    row = ClusterHeartbeat.objects.get(cluster=name)
    assert row.restarts >= 1
    assert re.match(r"stalled: \d+ queued task\(s\) waited over 5s and no task started or finished",
                    row.last_restart_reason), row.last_restart_reason
    assert "restarting qcluster" in log.read_text()
    assert clusters.wait_for(lambda: client.get("/healthz/").status_code == 200, seconds=45), log.read_text()[-4000:]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_the_lock_free_wait_a_killed_idle_worker_or_monitor_does_not_wedge_the_cluster(supervised):
    from django_q.models import OrmQ

    # A long stall time: the cluster must recover by itself, not through a restart. One cluster for both kills
    # (each costs a cluster start otherwise); the monitor is killed once the first recovery is shown.
    name, log = supervised(stall_after=600)
    killed = clusters.worker_pid(name, log)
    assert clusters.wait_for(lambda: clusters.blocked_in(killed, "poll", "select"), seconds=10)  # idle
    os.kill(killed, signal.SIGKILL)

    run = clusters.real_run()

    assert clusters.wait_for(lambda: _start_episode_done(run), seconds=30), log.read_text()[-4000:]
    assert ClusterHeartbeat.objects.get(cluster=name).restarts == 0
    assert clusters.worker_pid(name, log) != killed

    monitor = clusters.monitor_pid(name, log)
    assert clusters.wait_for(lambda: clusters.blocked_in(monitor, "poll", "select"), seconds=10)  # idle
    os.kill(monitor, signal.SIGKILL)

    second = clusters.real_run(like=run)

    assert clusters.wait_for(lambda: _start_episode_done(second), seconds=30), log.read_text()[-4000:]
    # The new monitor reads the results: the broker's rows are acknowledged (deleted), not left to be redelivered.
    assert clusters.wait_for(lambda: not OrmQ.objects.exists(), seconds=20), list(OrmQ.objects.values("id", "lock"))
    assert ClusterHeartbeat.objects.get(cluster=name).restarts == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_killed_busy_worker_is_replaced_and_runs_a_follow_up_the_supervisor_dispatches_within_seconds(
        supervised, tmp_path):
    from django_q.models import Schedule

    Schedule.objects.all().delete()  # only the supervisor's own dispatch can enqueue the follow-up
    name, log = supervised()
    marker = tmp_path / "busy.pid"
    async_task("tests.runs.cluster_helpers.hold", str(marker))
    assert clusters.wait_for(lambda: marker.exists() and marker.read_text(), seconds=20), log.read_text()[-4000:]
    os.kill(int(marker.read_text()), signal.SIGKILL)

    run = clusters.real_run()

    assert clusters.wait_for(lambda: _start_episode_done(run), seconds=30), log.read_text()[-4000:]
    # The heartbeat shows the replacement worker's progress (stamped just after the task returns).
    assert clusters.wait_for(lambda: ClusterHeartbeat.objects.get(cluster=name).last_task_finished_at, seconds=10)
    followup = Episode.objects.get(run=run, kind="followup", status=EpisodeStatus.QUEUED)

    _sql("UPDATE runs_episode SET due_at = statement_timestamp() + interval '2 seconds' WHERE id = %s", [followup.pk])

    assert clusters.wait_for(lambda: Episode.objects.get(pk=followup.pk).status == EpisodeStatus.DONE, seconds=20)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_qcluster_that_exits_is_started_again_and_dies_with_a_supervisor_killed_outright(supervised):
    name, log = supervised()
    first = ClusterHeartbeat.objects.get(cluster=name).pid
    os.killpg(first, signal.SIGKILL)

    assert clusters.wait_for(lambda: ClusterHeartbeat.objects.get(cluster=name).pid != first, seconds=20)
    row = ClusterHeartbeat.objects.get(cluster=name)
    assert row.restarts == 1 and row.last_restart_reason == "qcluster exited with status -9"
    run = clusters.real_run()
    assert clusters.wait_for(lambda: _start_episode_done(run), seconds=30), log.read_text()[-4000:]

    # The same cluster, its supervisor now SIGKILLed: no signal handler runs, the qcluster must go by itself.
    qcluster = psutil.Process(row.pid)
    group = [qcluster, *qcluster.children(recursive=True)]  # sentinel, worker, monitor, pusher
    assert len(group) >= 5
    supervisor_pid = psutil.Process(row.pid).ppid()
    os.kill(supervisor_pid, signal.SIGKILL)

    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert clusters.wait_for(lambda: all(gone(p) for p in group), seconds=30)


@pytest.mark.django_db
def test_a_failing_dispatch_is_logged_and_does_not_stop_the_supervisor(monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("dispatcher bug")

    monkeypatch.setattr(supervisor.dispatch, "dispatch_due", broken)
    runner = supervisor.Supervisor(cluster="c", stall_after=timedelta(seconds=5), check_every=1, dispatch_every=2)
    runner._dispatch()
    assert "cluster c: dispatch_due failed" in caplog.text
    assert "dispatcher bug" in caplog.text
