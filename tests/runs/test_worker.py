import threading
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from runs import lease_renewals, leases, starts, worker
from runs.context import EpisodeOutcome
from runs.models import Episode, EpisodeStatus, Escalation, Run, RunStatus, Task, TaskStatus
from tests.factories import EpisodeFactory, RunFactory, TaskFactory, deployed_agent
from tests.runs import fakes

NOW = "2025-03-03 15:00:00Z"


def _run_with_start_episode(**fields) -> tuple[Run, Episode]:
    run = RunFactory(**fields)
    TaskFactory(run=run)
    return run, EpisodeFactory(run=run, kind="start", dedupe_key="start")


def _expire(run_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [run_id])


def _expire_and_steal(run_id: int, *, owner: str = "thief") -> int:
    _expire(run_id)
    return leases.claim(run_id, owner=owner)


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_advance_runs_the_due_episode_applies_the_policy_and_releases(monkeypatch):
    run, start = _run_with_start_episode()
    loop, policy = fakes.install(monkeypatch, policy=fakes.FakePolicy(fakes.followup_in(2, now=timezone.now())))

    assert worker.advance_run(run.pk, owner="w1") is True

    assert loop.calls == [(1, 1)] and policy.asked == ["start"]
    start = Episode.objects.get(pk=start.pk)
    assert (start.status, start.attempts, start.lease_epoch) == (EpisodeStatus.DONE, 1, 1)
    assert start.started_at == start.finished_at == timezone.now()
    followup = Episode.objects.get(run=run, kind="followup")
    assert (followup.seq, followup.dedupe_key) == (2, "followup:after:1")
    assert followup.payload == {"step": 1, "channel": "email"}
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when, run.next_wake_at) == (RunStatus.WAITING, "followup:1", followup.due_at)
    assert run.state == {"v": 1, "policy": {"attempts": 1}}
    assert run.lease_owner is None
    assert fakes.queued_run_ids() == []  # nothing else is due


@pytest.mark.django_db
def test_a_second_delivery_finds_nothing_due_and_does_nothing(monkeypatch):
    run, _ = _run_with_start_episode()
    loop, _ = fakes.install(monkeypatch)
    assert worker.advance_run(run.pk) is True
    assert worker.advance_run(run.pk) is False
    assert len(loop.calls) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_deliveries_process_the_episode_once(monkeypatch):
    run, start = _run_with_start_episode()
    inside, let_go = threading.Event(), threading.Event()

    def slow_episode(ctx):
        inside.set()
        let_go.wait(timeout=10)

    loop, _ = fakes.install(monkeypatch, loop=fakes.FakeLoop(slow_episode))
    results = []

    def first_delivery():
        try:
            results.append(worker.advance_run(run.pk, owner="first"))
        finally:
            connection.close()

    thread = threading.Thread(target=first_delivery)
    thread.start()
    assert inside.wait(timeout=10)
    second = worker.advance_run(run.pk, owner="second")  # the lease is held: a harmless no-op
    let_go.set()
    thread.join(timeout=10)

    assert (second, results) == (False, [True])
    assert loop.calls == [(1, 1)]
    assert Episode.objects.get(pk=start.pk).attempts == 1


@pytest.mark.django_db
def test_due_episodes_run_in_seq_order_and_future_ones_wait(monkeypatch):
    run = RunFactory()
    now = timezone.now()
    for seq, due in ((1, now - timedelta(minutes=1)), (2, now - timedelta(hours=1)), (3, now + timedelta(hours=1))):
        EpisodeFactory(run=run, seq=seq, due_at=due)
    loop, _ = fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert [seq for seq, _ in loop.calls] == [1, 2]
    assert Episode.objects.get(run=run, seq=3).status == EpisodeStatus.QUEUED
    assert Run.objects.get(pk=run.pk).next_wake_at == now + timedelta(hours=1)


@pytest.mark.django_db
def test_the_slice_cap_stops_draining_and_reenqueues_the_run(monkeypatch, settings):
    settings.LUCIA_SLICE_STEP_CAP = 2
    run = RunFactory()
    for _ in range(3):
        EpisodeFactory(run=run)
    loop, _ = fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert len(loop.calls) == 2
    assert fakes.queued_run_ids() == [run.pk]


@pytest.mark.django_db
def test_a_spent_time_budget_stops_the_drain_after_one_episode_and_reenqueues(monkeypatch, settings):
    # The budget is a share of django-q2's timeout; one episode always runs, so a slice always progresses.
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 0}
    run = RunFactory()
    for _ in range(3):
        EpisodeFactory(run=run)
    loop, _ = fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert len(loop.calls) == 1
    assert fakes.queued_run_ids() == [run.pk]


@pytest.mark.django_db
def test_a_starting_task_clears_the_runs_waiting_task_mark(monkeypatch):
    run = RunFactory()
    EpisodeFactory(run=run)
    Run.objects.filter(pk=run.pk).update(advance_enqueued_at=timezone.now())
    fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert Run.objects.get(pk=run.pk).advance_enqueued_at is None


@pytest.mark.django_db
def test_a_simulated_run_follows_its_virtual_clock(monkeypatch):
    now = timezone.now()
    run = RunFactory(sim=True, virtual_now=now + timedelta(days=11))
    EpisodeFactory(run=run, seq=1, due_at=now + timedelta(days=10))
    EpisodeFactory(run=run, seq=2, due_at=now + timedelta(days=12))
    loop, _ = fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert [seq for seq, _ in loop.calls] == [1]
    assert fakes.queued_run_ids() == []  # the simulator, not the queue, drives sim runs


@pytest.mark.django_db
def test_only_a_real_run_has_its_lease_renewed_by_a_heartbeat_thread(monkeypatch):
    beating = []

    class Spy(lease_renewals.Heartbeat):
        def __init__(self, run_id: int, **kwargs) -> None:
            beating.append(run_id)
            super().__init__(run_id, **kwargs)

    monkeypatch.setattr(lease_renewals, "Heartbeat", Spy)
    fakes.install(monkeypatch)
    real, _ = _run_with_start_episode()
    simulated, _ = _run_with_start_episode(sim=True, virtual_now=timezone.now() + timedelta(minutes=1))

    assert worker.advance_run(real.pk) and worker.advance_run(simulated.pk)

    assert beating == [real.pk]  # virtual time needs no renewals: only the simulator advances a simulated run
    assert Run.objects.get(pk=simulated.pk).lease_owner is None


def _wait_for_renewal(run_id: int) -> bool:
    """A step that lasts until the run's lease is renewed past its expiry as the step found it (5 s at most)."""
    found, tick = Run.objects.get(pk=run_id).lease_expires_at, threading.Event()
    for _ in range(100):
        if Run.objects.get(pk=run_id).lease_expires_at > found:
            return True
        tick.wait(0.05)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_lease_held_through_a_long_step_is_renewed_by_the_heartbeat(monkeypatch):
    run, start = _run_with_start_episode()
    renewed = []

    def slow_model_call(ctx):
        renewed.append(_wait_for_renewal(ctx.run_id) and _wait_for_renewal(ctx.run_id))

    fakes.install(monkeypatch, loop=fakes.FakeLoop(slow_model_call))

    assert worker.advance_run(run.pk, owner="w1", heartbeat_interval=0.05) is True

    assert renewed == [True]
    assert Episode.objects.get(pk=start.pk).status == EpisodeStatus.DONE
    assert Run.objects.get(pk=run.pk).lease_owner is None


@pytest.mark.django_db(transaction=True)
def test_a_lease_lost_during_a_long_step_stops_the_worker_at_its_next_check(monkeypatch):
    run, start = _run_with_start_episode()
    noticed = []

    def slow_model_call(ctx):
        _expire_and_steal(ctx.run_id)  # the step outlasted the lease: another worker took the run
        noticed.append(ctx.heartbeat.lost.wait(timeout=5))  # the heartbeat's renewal found the epoch moved
        ctx.heartbeat.check()  # as the loop does between steps

    fakes.install(monkeypatch, loop=fakes.FakeLoop(slow_model_call))

    assert worker.advance_run(run.pk, owner="zombie", heartbeat_interval=0.05) is False

    assert noticed == [True]
    start = Episode.objects.get(pk=start.pk)
    assert (start.status, start.lease_epoch) == (EpisodeStatus.RUNNING, 1)  # left for the new holder to resume
    assert Run.objects.get(pk=run.pk).lease_owner == "thief"


@pytest.mark.django_db
def test_the_run_completes_when_every_required_task_is_done(monkeypatch):
    run, _ = _run_with_start_episode()
    later = EpisodeFactory(run=run, kind="followup", due_at=timezone.now() + timedelta(days=3))

    def collect(ctx):
        with ctx.fence():
            Task.objects.filter(run_id=ctx.run_id).update(status=TaskStatus.DONE)

    _, policy = fakes.install(monkeypatch, loop=fakes.FakeLoop(collect))
    worker.advance_run(run.pk)

    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.next_wake_at, run.wake_when) == (RunStatus.COMPLETED, None, None)
    assert run.ended_at is not None and run.outcome
    assert Episode.objects.get(pk=later.pk).status == EpisodeStatus.CANCELLED
    assert policy.asked == []  # done is decided on tasks, before any follow-up


@pytest.mark.django_db
def test_an_ended_run_runs_nothing(monkeypatch):
    run, start = _run_with_start_episode()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    loop, _ = fakes.install(monkeypatch)
    assert worker.advance_run(run.pk) is False
    assert loop.calls == []


@pytest.mark.django_db
def test_zombie_worker_writes_nothing_after_lease_lost_and_the_next_worker_resumes(monkeypatch):
    run, start = _run_with_start_episode()

    def paused_past_the_lease(ctx):
        if ctx.epoch == 1:
            _expire_and_steal(ctx.run_id)  # another worker claimed epoch 2 while this one was paused
        return EpisodeOutcome(finished=True)

    loop, policy = fakes.install(
        monkeypatch, loop=fakes.FakeLoop(paused_past_the_lease),
        policy=fakes.FakePolicy(fakes.followup_in(2, now=timezone.now())),
    )

    assert worker.advance_run(run.pk, owner="zombie") is False

    start = Episode.objects.get(pk=start.pk)
    assert (start.status, start.lease_epoch) == (EpisodeStatus.RUNNING, 1)
    assert policy.asked == [] and not Episode.objects.filter(run=run, kind="followup").exists()
    after = Run.objects.get(pk=run.pk)
    assert (after.state, after.lease_owner, after.lease_epoch) == ({"v": 1}, "thief", 2)

    _expire(run.pk)  # the thief died before touching the episode
    assert worker.advance_run(run.pk, owner="healthy") is True

    assert loop.calls == [(1, 1), (1, 3)]
    start = Episode.objects.get(pk=start.pk)
    assert (start.status, start.attempts, start.lease_epoch) == (EpisodeStatus.DONE, 2, 3)
    assert Episode.objects.filter(run=run, kind="followup").count() == 1


@pytest.mark.django_db
def test_a_failing_episode_is_retried_with_backoff_then_failed_with_a_stuck_escalation(monkeypatch, settings):
    settings.LUCIA_EPISODE_MAX_ATTEMPTS = 2

    def broken(ctx):
        raise RuntimeError("model returned garbage")

    loop, _ = fakes.install(monkeypatch, loop=fakes.FakeLoop(broken))
    with time_machine.travel(NOW, tick=False) as traveller:
        run, start = _run_with_start_episode()
        assert worker.advance_run(run.pk) is True
        start = Episode.objects.get(pk=start.pk)
        assert (start.status, start.attempts) == (EpisodeStatus.QUEUED, 1)
        assert "RuntimeError: model returned garbage" in start.error
        assert start.due_at == timezone.now() + timedelta(seconds=60)
        assert worker.advance_run(run.pk) is False  # backing off

        traveller.shift(timedelta(seconds=61))
        worker.advance_run(run.pk)

    start = Episode.objects.get(pk=start.pk)
    assert (start.status, start.attempts) == (EpisodeStatus.FAILED, 2)
    escalation = Escalation.objects.get(run=run)
    assert (escalation.kind, escalation.status, escalation.episode_id) == ("stuck", "open", start.pk)
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{escalation.pk}")
    assert len(loop.calls) == 2


@pytest.mark.django_db
def test_an_episode_left_running_past_the_attempt_limit_is_failed_not_rerun(monkeypatch, settings):
    settings.LUCIA_EPISODE_MAX_ATTEMPTS = 2
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=2, lease_epoch=1)
    Run.objects.filter(pk=run.pk).update(lease_epoch=1)
    loop, _ = fakes.install(monkeypatch)

    worker.advance_run(run.pk)

    assert loop.calls == []
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.FAILED
    assert Escalation.objects.get(run=run).kind == "stuck"


@pytest.mark.django_db
@time_machine.travel("2025-03-08 15:00:00Z", tick=False)  # a Saturday: step 0 waits for Monday
def test_the_real_follow_up_policy_arms_the_ladder_after_a_start_that_sent_nothing(monkeypatch):
    organization, deployment = deployed_agent()
    run = starts.start_run(organization, deployment=deployment, goal="W-9", contacts=[
        {"role": "vendor", "email": "v@example.com", "timezone": "America/New_York"}])
    monkeypatch.setattr("runs.execution.run_loop", fakes.FakeLoop())

    worker.advance_run(run.pk)

    followup = Episode.objects.get(run=run, kind="followup")
    assert followup.payload == {"step": 0, "channel": "email"}
    assert followup.due_at.astimezone(ZoneInfo("America/New_York")).strftime("%a %H") == "Mon 09"
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when, run.next_wake_at) == (RunStatus.WAITING, "followup:w9", followup.due_at)
    assert run.state["policy"]["next_due_at"] == followup.due_at.isoformat()


@pytest.mark.django_db
def test_a_worker_whose_lease_passed_to_another_owner_under_its_epoch_sends_and_frees_nothing(monkeypatch):
    from runs import execution
    from runs.models import EpisodeKind, OutboxMessage
    from tests.runs import loop_helpers

    run = loop_helpers.make_run()
    loop_helpers.add_episode(run, EpisodeKind.START)
    loop = execution.run_loop

    def after_a_lost_claim(ctx):
        # The database lost this worker's claim in a crash and the next claim took the same epoch.
        Run.objects.filter(pk=ctx.run_id).update(lease_owner="successor")
        return loop(ctx)

    monkeypatch.setattr(execution, "run_loop", after_a_lost_claim)

    assert worker.advance_run(run.pk, owner="lost", heartbeat_interval=3600) is False

    assert not OutboxMessage.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).lease_owner == "successor"
