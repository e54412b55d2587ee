"""The progress report behind /healthz/: each threshold, measured on the database clock.

A real wedged cluster turning /healthz/ 503 and back is shown in tests/runs/test_supervisor.py, on the same wedge
as the supervisor's restart (one cluster start and stall for both).
"""

from datetime import timedelta

import pytest
import time_machine
from django.db import OperationalError, connection
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from runs import health, heartbeats
from runs.models import EpisodeStatus
from tests.factories import EpisodeFactory, RunFactory


def _sql(statement: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _due_episode(*, seconds_ago: int, sim: bool = False):
    episode = EpisodeFactory(run=RunFactory(sim=sim))
    _sql("UPDATE runs_episode SET due_at = statement_timestamp() - make_interval(secs => %s) WHERE id = %s",
         [seconds_ago, episode.pk])
    return episode


def _executed(*, seconds_ago: int, cluster: str = "host:1") -> None:
    with heartbeats.beat(cluster):
        pass
    _sql("UPDATE runs_clusterheartbeat SET last_task_finished_at = statement_timestamp() - make_interval(secs => %s)"
         " WHERE cluster = %s", [seconds_ago, cluster])


@pytest.mark.django_db
def test_an_idle_runtime_is_healthy(client):
    response = client.get("/healthz/")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["problems"] == []
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["queued_tasks"] == 0 and body["checks"]["due_lag_seconds"] is None


@pytest.mark.django_db
def test_an_episode_due_past_the_due_lag_limit_is_unhealthy(settings):
    settings.LUCIA_HEALTH_MAX_DUE_LAG = 120
    _executed(seconds_ago=1)
    _due_episode(seconds_ago=60)
    assert health.report().healthy

    _due_episode(seconds_ago=300)
    report = health.report()
    assert report.due_episodes == 2 and report.due_lag_seconds >= 300
    assert [p for p in report.problems if p.startswith("due-lag")], report.problems


@pytest.mark.django_db
def test_simulated_and_ended_runs_do_not_count_toward_due_lag(settings):
    _executed(seconds_ago=1)
    _due_episode(seconds_ago=3600, sim=True)
    ended = _due_episode(seconds_ago=3600)
    _sql("UPDATE runs_run SET status = 'completed' WHERE id = %s", [ended.run_id])
    report = health.report()
    assert report.due_episodes == 0 and report.healthy


@pytest.mark.django_db
def test_a_task_queued_past_the_queue_age_limit_is_unhealthy(settings):
    settings.LUCIA_HEALTH_MAX_QUEUE_AGE = 120
    _executed(seconds_ago=1)
    with time_machine.travel(timezone.now() - timedelta(seconds=60)):
        async_task("runs.tasks.dispatch_due")
    assert health.report().healthy

    OrmQ.objects.all().delete()
    with time_machine.travel(timezone.now() - timedelta(minutes=5)):
        async_task("runs.tasks.dispatch_due")
    async_task("runs.tasks.dispatch_due")
    report = health.report()
    assert report.queued_tasks == 2 and report.oldest_queued_task_seconds >= 300
    assert [p for p in report.problems if p.startswith("queue")], report.problems


@pytest.mark.django_db
def test_no_task_executed_while_work_waits_is_unhealthy(settings):
    settings.LUCIA_HEALTH_MAX_IDLE = 180
    settings.LUCIA_HEALTH_MAX_DUE_LAG = 3600
    _due_episode(seconds_ago=10)
    _executed(seconds_ago=60)
    assert health.report().healthy

    _executed(seconds_ago=600)
    report = health.report()
    assert report.seconds_since_last_task >= 600
    assert report.problems == [p for p in report.problems if p.startswith("workers: no task executed for 6")]
    assert report.problems


@pytest.mark.django_db
def test_no_task_ever_executed_is_unhealthy_once_work_has_waited_past_the_limit(settings):
    settings.LUCIA_HEALTH_MAX_IDLE = 180
    settings.LUCIA_HEALTH_MAX_DUE_LAG = 3600
    _due_episode(seconds_ago=10)
    assert health.report().healthy  # just started: the workers have not had their chance yet

    _due_episode(seconds_ago=600)
    assert "workers: no task executed ever while work waits (limit 180s)" in health.report().problems


@pytest.mark.django_db
def test_no_recent_task_with_no_work_waiting_is_healthy():
    _executed(seconds_ago=3600)
    assert health.report().healthy


@pytest.mark.django_db
def test_a_lease_expired_past_the_limit_is_unhealthy(settings):
    settings.LUCIA_HEALTH_MAX_EXPIRED_LEASE = 120
    recent, old = RunFactory(), RunFactory()
    for run, seconds in ((recent, 30), (old, 300)):
        _sql("UPDATE runs_run SET lease_owner = 'dead-worker', lease_epoch = 1,"
             " lease_expires_at = statement_timestamp() - make_interval(secs => %s) WHERE id = %s", [seconds, run.pk])
    report = health.report()
    assert report.expired_leases == 2 and report.oldest_expired_lease_seconds >= 300
    assert [p for p in report.problems if p.startswith("leases: 2 run(s)")], report.problems

    _sql("UPDATE runs_run SET lease_owner = NULL, lease_expires_at = NULL WHERE id = %s", [old.pk])
    report = health.report()
    assert report.expired_leases == 1 and report.healthy


@pytest.mark.django_db
def test_failed_episodes_in_the_last_hour_are_reported_and_past_a_set_limit_unhealthy(settings):
    for finished_minutes_ago in (5, 30, 90):
        episode = EpisodeFactory(run=RunFactory())
        _sql("UPDATE runs_episode SET status = %s, finished_at = statement_timestamp() - make_interval(mins => %s)"
             " WHERE id = %s", [EpisodeStatus.FAILED, finished_minutes_ago, episode.pk])
    settings.LUCIA_HEALTH_MAX_FAILED_LAST_HOUR = 0
    report = health.report()
    assert report.failed_episodes_last_hour == 2 and report.healthy

    settings.LUCIA_HEALTH_MAX_FAILED_LAST_HOUR = 1
    assert health.report().problems == ["failures: 2 episodes failed in the last hour (limit 1)"]


@pytest.mark.django_db
def test_a_database_that_does_not_answer_is_a_503_naming_it(client, monkeypatch):
    def refuse():
        raise OperationalError("connection refused")

    monkeypatch.setattr(health, "_measure", refuse)
    response = client.get("/healthz/")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "error: OperationalError"
    assert response.json()["problems"] == ["database is not answering"]


@pytest.mark.django_db
def test_healthz_answers_503_with_the_reasons(client, settings):
    settings.LUCIA_HEALTH_MAX_DUE_LAG = 120
    _executed(seconds_ago=1)
    _due_episode(seconds_ago=300)
    response = client.get("/healthz/")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error"
    assert body["problems"] and body["problems"][0].startswith("due-lag")
    assert body["checks"]["clusters"][0]["cluster"] == "host:1"
