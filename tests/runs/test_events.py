import threading
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from runs import decisions, events, execution, leases
from runs.models import Episode, EpisodeStatus, EscalationKind, Run, RunStatus
from runs.models.escalation import Escalation
from tests.factories import EpisodeFactory, RunFactory
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db


def _set_status(run: Run, status: str, **fields) -> None:
    # Tests put runs in a state directly; the runtime only moves them through transitions.
    Run.objects.filter(pk=run.pk).update(status=status, **fields)


@time_machine.travel("2025-03-03 15:00:00Z", tick=False)
def test_an_event_becomes_the_next_episode_due_now_and_enqueues_the_run():
    run = RunFactory()
    EpisodeFactory(run=run, kind="start", dedupe_key="start", status=EpisodeStatus.DONE)

    episode = events.record_event(run, kind="inbound", payload={"text": "hi"}, dedupe_key="msg-1")

    assert (episode.seq, episode.kind, episode.status) == (2, "inbound", "queued")
    assert episode.due_at == timezone.now()
    assert queued_run_ids() == [run.pk]
    assert Run.objects.get(pk=run.pk).next_wake_at == timezone.now()


def test_a_duplicate_dedupe_key_stores_nothing_and_returns_none():
    run = RunFactory()
    first = events.record_event(run, kind="inbound", payload={}, dedupe_key="provider-42")
    assert events.record_event(run, kind="inbound", payload={"again": True}, dedupe_key="provider-42") is None
    assert list(Episode.objects.filter(run=run).values_list("pk", flat=True)) == [first.pk]
    assert queued_run_ids() == [run.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_from_two_threads_store_one_episode():
    run = RunFactory()
    barrier = threading.Barrier(2)
    results = []

    def deliver():
        try:
            barrier.wait(timeout=5)
            results.append(events.record_event(run, kind="inbound", payload={}, dedupe_key="webhook-retry"))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(result is None for result in results) == [False, True]
    assert Episode.objects.filter(run=run).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_distinct_events_get_consecutive_seqs():
    run = RunFactory()
    barrier = threading.Barrier(6)

    def deliver(n):
        try:
            barrier.wait(timeout=5)
            events.record_event(run, kind="event", payload={}, dedupe_key=f"event-{n}")
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(Episode.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6]


def test_a_reply_cancels_the_pending_followup():
    run = RunFactory()
    followup = EpisodeFactory(run=run, kind="followup", due_at=timezone.now() + timedelta(days=2))
    _set_status(run, RunStatus.WAITING, wake_when="followup:1", next_wake_at=followup.due_at)

    events.record_event(run, kind="inbound", payload={"text": "Here it is"}, dedupe_key="reply-1")

    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.CANCELLED
    woken = Run.objects.get(pk=run.pk)
    assert (woken.status, woken.wake_when) == (RunStatus.ACTIVE, None)
    assert woken.next_wake_at <= timezone.now()


def test_a_non_reply_event_keeps_the_pending_followup():
    run = RunFactory()
    followup = EpisodeFactory(run=run, kind="followup", due_at=timezone.now() + timedelta(days=2))
    events.record_event(run, kind="event", payload={"note": "crm updated"}, dedupe_key="crm-1")
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.QUEUED


def test_a_run_waiting_for_a_human_keeps_waiting_while_the_question_is_open():
    run = RunFactory()
    escalation = Escalation.objects.create(organization=run.organization, run=run, kind=EscalationKind.QUESTION,
                                           prompt="Pay the fee?")
    _set_status(run, RunStatus.WAITING_HUMAN, wake_when=f"human:{escalation.pk}")

    assert events.record_event(run, kind="inbound", payload={}, dedupe_key="reply-1") is not None

    still = Run.objects.get(pk=run.pk)
    assert (still.status, still.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{escalation.pk}")
    assert queued_run_ids() == [run.pk]


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_an_ended_run_takes_no_events(status):
    run = RunFactory()
    _set_status(run, status)
    with pytest.raises(events.RunEnded):
        events.record_event(run, kind="inbound", payload={}, dedupe_key="late-reply")
    assert not Episode.objects.filter(run=run).exists()
    assert queued_run_ids() == []


def test_a_rolled_back_event_leaves_neither_episode_nor_queue_row():
    run = RunFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        events.record_event(run, kind="inbound", payload={}, dedupe_key="m-1")
        raise RuntimeError("the webhook failed after recording")
    assert not Episode.objects.filter(run=run).exists()
    assert queued_run_ids() == []


def test_a_simulated_run_is_not_enqueued():
    run = RunFactory(sim=True, virtual_now=timezone.now() + timedelta(days=30))
    episode = events.record_event(run, kind="inbound", payload={}, dedupe_key="sim-1")
    assert episode.due_at == run.virtual_now  # the run's clock, not the wall clock
    assert queued_run_ids() == []


def test_a_planned_episode_keeps_its_time_to_the_microsecond_whatever_its_zone():
    # The closing write takes planned episodes as JSON text (runs.events.closing_params): their times travel as ISO
    # text with their offset, here a New York time an hour before a DST change.
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="test")
    due = datetime(2025, 3, 9, 0, 59, 59, 123456, tzinfo=ZoneInfo("America/New_York"))
    planned = events.Planned(kind="followup", due_at=due, dedupe_key="followup-1", payload={"attempt": 1})
    with leases.fence(run.pk, epoch=epoch) as locked:
        execution._close(locked, fields=[], decision=decisions.Decision(scheduled=[planned]), epoch=epoch)

    episode = Episode.objects.get(run=run, dedupe_key="followup-1")
    assert (episode.due_at, episode.payload, episode.status) == (due, {"attempt": 1}, EpisodeStatus.QUEUED)
