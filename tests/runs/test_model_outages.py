"""A model that is down postpones the episode over minutes to hours; only a long outage escalates, once per
run, and the run resumes by itself (closing that escalation) when the model answers again."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runs import episode_loads, events, execution, worker
from runs.llm.base import ChatRequest, ModelError, ModelReply
from runs.llm.scripted import ScriptedProvider
from runs.models import (
    Episode,
    EpisodeKind,
    EpisodeStatus,
    Escalation,
    EscalationStatus,
    JournalEntry,
    OutboxMessage,
    Run,
    RunStatus,
)
from tests.runs import lock_waits
from tests.runs import loop_helpers as h

pytestmark = pytest.mark.django_db


class Flaky:
    """The scripted model behind a switch: while `down`, every call is a 429 (retryable)."""

    name = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.down = True
        self.failures = 0

    def complete(self, request: ChatRequest) -> ModelReply:
        if self.down:
            self.failures += 1
            raise ModelError("429 rate limited", retryable=True)
        return self.inner.complete(request)


@pytest.fixture
def model(monkeypatch, settings) -> Flaky:
    settings.LUCIA_MODEL_RETRY_SECONDS = 60
    settings.LUCIA_MODEL_RETRY_MAX_SECONDS = 3600
    settings.LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S = 6 * 3600
    flaky = Flaky()
    h.use_provider(monkeypatch, flaky)
    return flaky


def _advance(run: Run, now) -> Run:
    Run.objects.filter(pk=run.pk).update(virtual_now=now)
    worker.advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def _started(run: Run) -> Run:
    events.record_event(run, kind=EpisodeKind.START, payload={}, dedupe_key="start")
    return _advance(run, run.virtual_now)


def _outage_notes(run: Run) -> list[dict]:
    return [e.data for e in JournalEntry.objects.filter(run=run, kind="note").order_by("seq")
            if e.data.get("model_outage")]


def _retry_until(run: Run, *, until) -> Run:
    """Advance the clock to each retry of the postponed episode while it is due before `until`."""
    while (episode := Episode.objects.filter(run=run, status=EpisodeStatus.QUEUED).order_by("due_at").first()) \
            and episode.due_at < until:
        run = _advance(run, episode.due_at)
    return run


def test_a_model_outage_postpones_the_episode_with_a_doubling_capped_backoff_and_sends_nothing(model):
    run = _started(h.make_run())
    start = run.virtual_now

    episode = Episode.objects.get(run=run, kind=EpisodeKind.START)
    assert episode.status == EpisodeStatus.QUEUED and episode.attempts == 0
    assert episode.due_at == start + timedelta(seconds=60)
    assert run.status == RunStatus.WAITING and run.wake_when == "model:outage"
    assert run.next_wake_at == episode.due_at
    assert run.lease_owner is None  # the postponement's closing write released it: nothing else was due
    assert not OutboxMessage.objects.exists() and not Escalation.objects.exists()

    run = _retry_until(run, until=start + timedelta(hours=3))
    waits = [(n["failures"], (_parse(n["retry_at"]) - _parse(n["since"]))) for n in _outage_notes(run)]
    gaps = [b - a for (_, a), (_, b) in zip(waits, waits[1:], strict=False)]
    assert [int(g.total_seconds()) for g in gaps[:6]] == [120, 240, 480, 960, 1920, 3600]
    assert {int(g.total_seconds()) for g in gaps[6:]} == {3600}  # capped at an hour
    assert model.failures == len(waits) and len(waits) >= 8
    assert not OutboxMessage.objects.exists() and not Escalation.objects.exists()
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.QUEUED  # still due, never failed


def test_an_outage_postpones_each_due_episode_in_one_advance(model):
    run = h.make_run()
    h.add_episode(run, EpisodeKind.START)
    h.inbound(run, "Here it is")

    run = _advance(run, run.virtual_now)  # the first postponement keeps the lease: the second episode is due

    assert model.failures == 2 and run.lease_owner is None
    assert sorted(Episode.objects.filter(run=run).values_list("status", flat=True)) == [EpisodeStatus.QUEUED] * 2
    assert run.next_wake_at == run.virtual_now + timedelta(seconds=60)


def test_the_run_resumes_by_itself_when_the_model_is_back(model):
    run = _started(h.make_run())
    run = _retry_until(run, until=run.virtual_now + timedelta(minutes=10))
    model.down = False
    run = _retry_until(run, until=run.virtual_now + timedelta(hours=2))

    assert Episode.objects.get(run=run, kind=EpisodeKind.START).status == EpisodeStatus.DONE
    assert OutboxMessage.objects.filter(run=run).count() == 1
    assert "model_outage" not in run.state
    assert run.status == RunStatus.WAITING and run.wake_when.startswith("followup:")
    over = [e.data for e in JournalEntry.objects.filter(run=run, kind="note") if e.data.get("model_outage_over")]
    assert len(over) == 1 and "resumed by itself" in over[0]["text"]


def test_only_a_prolonged_outage_escalates_once_per_run_and_the_escalation_closes_when_the_model_is_back(model):
    run = _started(h.make_run())
    start = run.virtual_now

    run = _retry_until(run, until=start + timedelta(hours=5, minutes=30))
    assert not Escalation.objects.filter(run=run).exists()

    run = _retry_until(run, until=start + timedelta(hours=12))
    escalation = Escalation.objects.get(run=run)
    assert escalation.kind == "stuck" and escalation.status == EscalationStatus.OPEN
    assert escalation.context["reason"] == "model_outage" and "unavailable for 6 h" in escalation.prompt
    # A notice: the run does not wait on a human, its postponed episode stays due.
    assert run.status == RunStatus.WAITING
    assert Episode.objects.get(run=run, kind=EpisodeKind.START).status == EpisodeStatus.QUEUED

    model.down = False
    run = _retry_until(run, until=start + timedelta(hours=14))
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.RESOLVED and escalation.answered_via == "runtime"
    assert "answered again" in escalation.answer
    assert OutboxMessage.objects.filter(run=run).count() == 1

    # A second long outage on the next follow-up: retried, no second escalation.
    model.down = True
    followup = Episode.objects.get(run=run, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED)
    run = _retry_until(run, until=followup.due_at + timedelta(hours=10))
    assert Escalation.objects.filter(run=run).count() == 1
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.QUEUED
    assert run.state["model_outage"]["failures"] > 5


CHICAGO = ZoneInfo("America/Chicago")


def _local_retries(run: Run) -> list[datetime]:
    return [_parse(note["retry_at"]).astimezone(CHICAGO) for note in _outage_notes(run)]


def test_a_follow_up_outside_its_send_window_is_retried_when_the_window_opens_after_the_outage_s_notice(model):
    # Tuesday 16:30 in Chicago, the contact's zone (loop_helpers.make_run): the window (09:00-17:00 on weekdays)
    # closes in half an hour.
    run = h.make_run(now=datetime(2025, 3, 4, 16, 30, tzinfo=CHICAGO))
    since = run.virtual_now
    followup = h.add_episode(run, EpisodeKind.FOLLOWUP)
    notice_due = since + timedelta(hours=6)

    run = _retry_until(run, until=notice_due)
    assert not Escalation.objects.filter(run=run).exists()
    run = _retry_until(run, until=notice_due + timedelta(minutes=1))
    # The outage's notice went out when it fell due, at night; the follow-up is still due.
    escalation = Escalation.objects.get(run=run)
    assert escalation.context["reason"] == "model_outage" and "unavailable for 6 h" in escalation.prompt
    run = _retry_until(run, until=datetime(2025, 3, 5, 12, 0, tzinfo=CHICAGO))

    retries = _local_retries(run)
    # Inside the window at the backoff; the first retry it would put after 17:00 is the one the notice needs, six
    # hours in; then one six hours after that, and the next when Wednesday's window opens (plus the run's fixed
    # offset, under 5 min).
    inside = [at for at in retries if at.date() == since.date() and at.hour < 17]
    assert [int((b - a).total_seconds()) for a, b in zip([since, *inside], inside, strict=False)] == [
        60, 120, 240, 480]
    assert retries[len(inside):len(inside) + 2] == [notice_due, notice_due + timedelta(hours=6)]
    wednesday = retries[len(inside) + 2]
    assert wednesday.date() == datetime(2025, 3, 5).date() and (wednesday.hour, wednesday.minute // 5) == (9, 0)
    assert all(at.date() == wednesday.date() and 9 <= at.hour < 17 for at in retries[len(inside) + 2:])
    assert model.failures == len(retries) < 15  # not once an hour through the night
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.QUEUED
    assert Escalation.objects.filter(run=run).count() == 1

    model.down = False
    run = _retry_until(run, until=datetime(2025, 3, 5, 14, 0, tzinfo=CHICAGO))
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.DONE
    assert Escalation.objects.get(run=run).status == EscalationStatus.RESOLVED


def test_over_a_weekend_a_notified_outage_is_retried_every_six_hours_so_its_notice_closes_when_the_model_is_back(
        model):
    run = h.make_run(now=datetime(2025, 3, 7, 16, 30, tzinfo=CHICAGO))  # Friday
    followup = h.add_episode(run, EpisodeKind.FOLLOWUP)
    run = _retry_until(run, until=datetime(2025, 3, 8, 12, 0, tzinfo=CHICAGO))  # Saturday noon: still down
    assert Escalation.objects.get(run=run).status == EscalationStatus.OPEN
    saturday = [at for at in _local_retries(run) if at.date() == datetime(2025, 3, 8).date()]
    assert [at.strftime("%H:%M") for at in saturday] == ["04:30", "10:30", "16:30"]

    model.down = False
    run = _retry_until(run, until=datetime(2025, 3, 8, 17, 0, tzinfo=CHICAGO))

    escalation = Escalation.objects.get(run=run)
    assert escalation.status == EscalationStatus.RESOLVED and "answered again" in escalation.answer
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.DONE
    assert not OutboxMessage.objects.filter(run=run, status="sent").exists()  # what it wrote waits for Monday


def test_a_reply_postponed_at_night_is_retried_after_the_backoff(model):
    # Tuesday 23:00 in Chicago: outside the window, but what a reply settles may not wait for it.
    run = h.make_run(now=datetime(2025, 3, 4, 23, 0, tzinfo=CHICAGO))
    h.inbound(run, "Please stop writing to me.")

    run = _advance(run, run.virtual_now)

    assert _local_retries(run) == [run.virtual_now + timedelta(seconds=60)]


def test_a_failure_retrying_cannot_fix_still_escalates_at_once(monkeypatch):
    class Refusing:
        name = "test"

        def complete(self, request: ChatRequest) -> ModelReply:
            raise ModelError("401 invalid api key", retryable=False)

    h.use_provider(monkeypatch, Refusing())
    run = _started(h.make_run())

    escalation = Escalation.objects.get(run=run)
    assert escalation.kind == "stuck" and "401" in escalation.prompt
    assert run.status == RunStatus.WAITING_HUMAN
    assert not OutboxMessage.objects.exists()


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def test_each_postponement_reads_in_the_timeline(model):
    from runs import timeline

    run = _started(h.make_run())
    run = _retry_until(run, until=run.virtual_now + timedelta(minutes=5))

    notes = [item.summary for item in timeline.timeline_for(run) if item.type == "journal" and item.kind == "note"]
    assert len(notes) == 3
    assert all(n.startswith("model unavailable (429 rate limited") and "episode #1 retried at" in n for n in notes)


@pytest.mark.django_db(transaction=True)
def test_a_reply_recorded_while_the_postponement_waited_for_the_run_row_keeps_the_lease(model):
    # The postponement is one statement whose snapshot predates its wait for the row lock: it must not release the
    # lease on the strength of a snapshot that misses the reply's episode (nobody would run it: its enqueue found
    # the lease held).
    run = h.make_run()
    h.add_episode(run, EpisodeKind.START)
    start = episode_loads.claim_and_start(run.pk, owner="test")
    epoch = start.run.lease_epoch
    results = []

    def reply() -> None:
        events.record_event(run, kind=EpisodeKind.INBOUND, dedupe_key="reply-1",
                            payload={"channel": "email", "from": h.VENDOR_EMAIL, "text": "Here it is"})

    def postpone() -> None:
        results.append(execution.execute(execution.start_next(start, epoch=epoch), epoch=epoch, heartbeat=None))

    # The postponement's statement begins before the reply commits.
    errors, blocked = lock_waits.behind_a_writer(reply, postpone)

    assert errors == [] and blocked and model.failures == 1
    [(_, released)] = results
    saved = Run.objects.get(pk=run.pk)
    assert not released and saved.lease_owner == "test"  # the worker goes on to the reply's episode
    inbound = Episode.objects.get(run=run, kind=EpisodeKind.INBOUND)
    assert inbound.status == EpisodeStatus.QUEUED
    assert saved.next_wake_at == inbound.due_at
    assert Episode.objects.get(run=run, kind=EpisodeKind.START).status == EpisodeStatus.QUEUED
    assert saved.wake_when == "model:outage" and saved.state["model_outage"]["failures"] == 1
