"""The reaper (runs.dispatch.reap_expired): episodes left running under an expired lease are requeued, or failed
past the attempt limit, by a pass that claims each run's lease first, so it is fenced like any worker."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs import dispatch
from runs.models import Episode, EpisodeStatus, Escalation, OutboxMessage, OutboxStatus, Run, RunStatus
from tests.factories import EpisodeFactory, RunFactory
from tests.runs import loop_helpers as h
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db


def test_the_reaper_requeues_an_episode_whose_worker_died_and_fences_the_zombie():
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    h.hold_lease(run, seconds=-5, epoch=1)

    assert dispatch.reap_expired() == 1

    episode = Episode.objects.get(pk=episode.pk)
    assert (episode.status, episode.attempts) == (EpisodeStatus.QUEUED, 1)
    assert "expired" in episode.error
    run = Run.objects.get(pk=run.pk)
    assert (run.lease_epoch, run.lease_owner) == (2, None)  # the reaper claimed (fencing epoch 1) and released
    assert queued_run_ids() == [run.pk]


def test_a_reaper_whose_claim_was_lost_reaps_nothing_and_leaves_the_holder_s_lease(monkeypatch):
    """The reaper's fence checks its owner beside the epoch: once its claim was handed to another holder with the
    same epoch (a database crash took the claim back), it requeues nothing and releases nothing of theirs."""
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    h.hold_lease(run, seconds=-5, epoch=1)
    h.lose_claims(monkeypatch)

    assert dispatch.reap_expired() == 0
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.RUNNING
    run = Run.objects.get(pk=run.pk)
    assert (run.lease_epoch, run.lease_owner) == (2, "successor")
    assert queued_run_ids() == []


def test_the_reaper_fails_and_escalates_past_the_attempt_limit(settings):
    settings.LUCIA_EPISODE_MAX_ATTEMPTS = 2
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=2, lease_epoch=1)
    h.hold_lease(run, seconds=-5, epoch=1)

    assert dispatch.reap_expired() == 1

    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.FAILED
    escalation = Escalation.objects.get(run=run)
    assert (escalation.kind, escalation.episode_id) == ("stuck", episode.pk)
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN
    assert queued_run_ids() == []


def test_an_episode_given_up_mid_send_leaves_its_message_uncertain_with_its_own_question(settings):
    settings.LUCIA_EPISODE_MAX_ATTEMPTS = 2
    run = RunFactory()
    episode = EpisodeFactory(run=run, seq=2, status=EpisodeStatus.RUNNING, attempts=2, lease_epoch=1)
    requeued = EpisodeFactory(run=run, seq=1, status=EpisodeStatus.QUEUED, attempts=1)
    now = timezone.now()

    def sending(key: str, *, of=episode, not_before=None) -> OutboxMessage:
        return OutboxMessage.objects.create(
            idem_key=key, run=run, episode=of, tool="send_sms", channel="sms", recipient="+15550100",
            payload={"body": key}, status=OutboxStatus.SENDING, attempts=1, created_at=now, attempted_at=now,
            not_before=not_before)

    in_flight = sending("in-flight")  # its worker died after the row went `sending`
    lookup_missed = sending("lookup-missed", not_before=now - timedelta(minutes=1))  # this episode was to look it up
    sending("lookup-ahead", not_before=now + timedelta(minutes=5))  # a flush episode looks it up then
    sending("its-own", of=requeued)  # its episode, requeued, finds it by key and looks it up
    h.hold_lease(run, seconds=-5, epoch=1)

    assert dispatch.reap_expired() == 1

    status = dict(OutboxMessage.objects.filter(run=run).values_list("idem_key", "status"))
    assert status == {"in-flight": "uncertain", "lookup-missed": "uncertain", "lookup-ahead": "sending",
                      "its-own": "sending"}
    asked = Escalation.objects.filter(run=run, status="open")
    assert sorted(asked.values_list("kind", flat=True)) == ["stuck", "uncertain_send", "uncertain_send"]
    question = asked.get(outbox_message=in_flight)
    assert "given up" in question.prompt and question.context["attempted_at"] == now.isoformat()
    assert asked.filter(outbox_message=lookup_missed).exists()
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{asked.get(kind='stuck').pk}")


def test_the_reaper_leaves_episodes_under_a_live_lease_alone():
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    h.hold_lease(run, seconds=60, epoch=1)
    assert dispatch.reap_expired() == 0
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.RUNNING
    assert Run.objects.get(pk=run.pk).lease_epoch == 1


def test_one_failing_reap_never_blocks_the_others(monkeypatch):
    runs = []
    for _ in range(3):
        run = RunFactory()
        EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
        h.hold_lease(run, seconds=-5, epoch=1)
        runs.append(run)
    reap_run = dispatch._reap_run

    def failing(run_id, *, epoch, owner):
        if run_id == runs[0].pk:
            raise RuntimeError("disk full")
        return reap_run(run_id, epoch=epoch, owner=owner)

    monkeypatch.setattr(dispatch, "_reap_run", failing)
    assert dispatch.reap_expired(batch=1) == 2
    statuses = dict(Episode.objects.filter(run__in=runs).values_list("run_id", "status"))
    assert statuses == {runs[0].pk: "running", runs[1].pk: "queued", runs[2].pk: "queued"}
    assert Run.objects.get(pk=runs[0].pk).lease_owner is None  # the failed reap released its claim


def test_the_reaper_ends_a_cancelled_runs_running_episode_and_queues_nothing():
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, lease_epoch=1)
    h.hold_lease(run, seconds=-5, epoch=1)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)

    assert dispatch.reap_expired() == 1

    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.FAILED
    assert queued_run_ids() == []
    assert dispatch.reap_expired() == 0
