"""A send the window or a per-contact cap holds back goes out later, as it was, without moving the ladder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from connectors.models import SandboxMessage
from runs import events, policy, submissions, worker
from runs.llm.base import ChatRequest, ModelReply, ToolCall
from runs.models import Episode, EpisodeKind, EpisodeStatus, OutboxMessage, OutboxStatus, Run, RunStatus
from tests.runs import loop_helpers as h

pytestmark = pytest.mark.django_db

# Tuesday 22:00 in Chicago: inside quiet hours (20:00 → 08:00), after business hours.
TUESDAY_NIGHT = datetime(2025, 3, 5, 4, 0, tzinfo=UTC)
ACK = {"to_role": "vendor", "subject": "Re: W-9", "body": "Thanks Dana, noted."}
ASK = {"to_role": "vendor", "subject": "Your W-9", "body": "Could you send your signed W-9?"}


class Script:
    """A model that makes the sends it is given, one list per episode, then stops; counts the calls it gets."""

    name = "scripted"

    def __init__(self, *episodes: list[dict]) -> None:
        self.episodes = list(episodes)
        self.calls = 0

    def complete(self, request: ChatRequest) -> ModelReply:
        self.calls += 1
        sends = [] if request.messages[-1]["role"] == "tool" or not self.episodes else self.episodes.pop(0)
        calls = [ToolCall(id=f"call-{self.calls}-{i}", name="send_email", arguments=args)
                 for i, args in enumerate(sends)]
        return ModelReply(content=None if calls else "done", tool_calls=calls,
                          finish_reason="tool_calls" if calls else "stop", tokens_in=10, tokens_out=5,
                          cost=Decimal("0"), model_name="scripted", provider="scripted")


def _at(run: Run, now: datetime) -> Run:
    Run.objects.filter(pk=run.pk).update(virtual_now=now)
    worker.advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def _reply(run: Run, text: str, *, key: str, files: list | None = None) -> None:
    submissions.record(Run.objects.get(pk=run.pk), kind=EpisodeKind.INBOUND, dedupe_key=key, sender=h.VENDOR_EMAIL,
                       channel="email", text=text, files=files or [], extra={"subject": "Re: W-9"})


def _queued(run: Run, kind: str) -> list[Episode]:
    return list(Episode.objects.filter(run=run, kind=kind, status=EpisodeStatus.QUEUED).order_by("due_at"))


def _window_opening(run: Run, at: datetime) -> datetime:
    return policy.check_send_window(run.plan, contact_tz="America/Chicago", org_tz="UTC", now=at,
                                    run_id=run.offset_key)


def _started(monkeypatch, script: Script, *, now: datetime = h.BUSINESS_HOURS) -> Run:
    h.use_provider(monkeypatch, script)
    # Every reply may be acknowledged: ACK is the held message these tests follow (runs.acknowledgements).
    run = h.make_run(h.template_plan(acknowledge="every_reply"), now=now)
    events.record_event(run, kind=EpisodeKind.START, payload={}, dedupe_key="start")
    return _at(run, now)


def test_a_send_in_quiet_hours_is_held_and_flushed_once_at_the_window_opening_without_moving_the_ladder(
        monkeypatch):
    script = Script([ASK], [ACK])
    run = _started(monkeypatch, script)
    _reply(run, "I'll send it tomorrow.", key="reply-1")
    run = _at(run, TUESDAY_NIGHT)

    held = OutboxMessage.objects.get(run=run, status=OutboxStatus.PENDING)
    opening = _window_opening(run, TUESDAY_NIGHT)
    assert held.not_before == opening and held.payload["body"] == ACK["body"]
    assert SandboxMessage.objects.count() == 1  # only the first ask went out
    [followup] = _queued(run, EpisodeKind.FOLLOWUP)
    # on_reply=pause: the ladder resumes reply_grace after the reply, not at the held message's time.
    assert followup.due_at >= TUESDAY_NIGHT + timedelta(days=2)
    [flush] = _queued(run, EpisodeKind.EVENT)
    assert flush.payload == {"flush_outbox": True} and flush.due_at == opening
    assert (run.next_wake_at, run.wake_when) == (opening, "followup:collect_w9")

    calls = script.calls
    run = _at(run, opening)

    held.refresh_from_db()
    assert (held.status, held.attempts, held.sent_at) == (OutboxStatus.SENT, 1, opening)
    sent = SandboxMessage.objects.get(idem_key=held.idem_key)
    assert sent.payload["body"] == ACK["body"]
    assert script.calls == calls  # the flush asks no model
    assert _queued(run, EpisodeKind.FOLLOWUP) == [followup]  # same row, same time
    assert (run.status, run.next_wake_at, run.wake_when) == (RunStatus.WAITING, followup.due_at,
                                                             "followup:collect_w9")

    # A re-executed flush (a crash before its close) finds the row sent and sends nothing.
    Episode.objects.filter(pk=flush.pk).update(status=EpisodeStatus.QUEUED)
    _at(run, opening + timedelta(minutes=1))
    held.refresh_from_db()
    assert held.attempts == 1 and SandboxMessage.objects.count() == 2


def test_a_second_reply_held_in_the_same_night_leaves_one_flush_and_one_followup(monkeypatch):
    again = {**ACK, "body": "Thanks again Dana."}
    script = Script([ASK], [ACK], [again])
    run = _started(monkeypatch, script)
    _reply(run, "I'll send it tomorrow.", key="reply-1")
    run = _at(run, TUESDAY_NIGHT)
    _reply(run, "Actually, Thursday.", key="reply-2")
    run = _at(run, TUESDAY_NIGHT + timedelta(minutes=5))

    opening = _window_opening(run, TUESDAY_NIGHT)
    assert sorted(OutboxMessage.objects.filter(run=run, status=OutboxStatus.PENDING)
                  .values_list("not_before", flat=True)) == [opening, opening]
    # The first night's flush is due by then: the second decision schedules no other.
    [flush] = _queued(run, EpisodeKind.EVENT)
    assert flush.due_at == opening
    [followup] = _queued(run, EpisodeKind.FOLLOWUP)  # the latest decision's; the earlier one was cancelled
    assert followup.dedupe_key == f"followup:after:{Episode.objects.get(run=run, dedupe_key='reply-2').seq}"
    assert run.next_wake_at == opening and not run.lease_owner


def test_a_send_over_the_per_day_cap_is_held_until_the_cap_frees_then_sent(monkeypatch):
    script = Script([ASK, {**ASK, "body": "And the 1099, please."}, {**ASK, "body": "Also your bank details."}])
    run = _started(monkeypatch, script)

    held = OutboxMessage.objects.get(run=run, status=OutboxStatus.PENDING)
    assert held.not_before == h.BUSINESS_HOURS + timedelta(days=1)  # per_day is 2: the first send ages out
    assert SandboxMessage.objects.count() == 2
    [followup] = _queued(run, EpisodeKind.FOLLOWUP)
    assert followup.due_at > held.not_before + timedelta(days=1)  # step 1: three business days on

    run = _at(run, held.not_before)

    held.refresh_from_db()
    assert held.status == OutboxStatus.SENT
    assert SandboxMessage.objects.get(idem_key=held.idem_key).payload["body"] == "Also your bank details."
    assert _queued(run, EpisodeKind.FOLLOWUP) == [followup]


def test_a_run_done_at_night_sends_its_held_thanks_at_the_window_opening_then_completes(monkeypatch):
    script = Script([ASK], [ACK])
    run = _started(monkeypatch, script)
    _reply(run, "Here it is.", key="reply-pdf", files=[h.PDF])
    run = _at(run, TUESDAY_NIGHT)

    assert run.tasks.get().status == "done"
    assert (run.status, run.wake_when) == (RunStatus.WAITING, "outbox:held")
    assert _queued(run, EpisodeKind.FOLLOWUP) == []
    held = OutboxMessage.objects.get(run=run, status=OutboxStatus.PENDING)

    run = _at(run, held.not_before)

    held.refresh_from_db()
    assert held.status == OutboxStatus.SENT
    assert SandboxMessage.objects.filter(idem_key=held.idem_key).exists()
    assert run.status == RunStatus.COMPLETED and run.next_wake_at is None
