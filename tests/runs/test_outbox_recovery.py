"""Re-executing a send finds its outbox row: sent adopts, pending sends, sending asks the provider first."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from connectors.models import SandboxMessage
from runs import escalations, loop, outbox, tool_executor
from runs.models import Escalation, EscalationKind, OutboxMessage, OutboxStatus, Run, RunStatus
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"
    # Recovery itself, not its timing (tests/runs/test_provider_faults.py): look up at once, and a lookup
    # the provider cannot answer asks a human straight away.
    settings.LUCIA_SEND_SETTLE_SECONDS = 0
    settings.LUCIA_SEND_LOOKUP_TRIES = 1


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


def _row(run, episode, *, status: str, body: str = "Hi Dana, the W-9 please. Reply STOP to opt out.") -> OutboxMessage:
    """The row an earlier attempt of the episode left behind (ordinal 0 of send_sms to the vendor)."""
    key = outbox.idem_key(run_id=run.pk, episode_id=episode.pk, task_key="collect_w9", tool="send_sms",
                          recipient=s.VENDOR_NUMBER, ordinal=0)
    return OutboxMessage.objects.create(
        idem_key=key, run=run, episode=episode, task_key="collect_w9", tool="send_sms", channel="sms",
        recipient=s.VENDOR_NUMBER, payload={"body": body}, status=status, attempts=1 if status != "pending" else 0,
        created_at=timezone.now(),
    )


def _setup(twilio, *, status: str):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    return run, episode, _row(run, episode, status=status)


def test_a_sent_row_is_adopted_without_calling_the_provider(twilio):
    run, episode, row = _setup(twilio, status=OutboxStatus.PENDING)
    OutboxMessage.objects.filter(pk=row.pk).update(status=OutboxStatus.SENT, provider_message_id="SMfirst")
    result, _ = s.dispatch(run, episode, "send_sms", s.SMS)

    assert result == {"ok": True, "status": "sent", "channel": "sms", "to_role": "vendor", "message_id": row.pk}
    assert twilio.requests == []


def test_a_pending_row_is_sent_with_its_first_payload(twilio):
    run, episode, row = _setup(twilio, status=OutboxStatus.PENDING)
    # The model rewrote the text after the crash: same key, so the first payload stands.
    result, _ = s.dispatch(run, episode, "send_sms", {**s.SMS, "body": "rewritten"})

    assert result["status"] == "sent"
    [create] = twilio.calls_to("/Messages.json", method="POST")
    assert create.first("Body") == row.payload["body"]
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.SENT


def test_a_sending_row_found_at_the_provider_is_adopted_with_its_id(twilio):
    run, episode, row = _setup(twilio, status=OutboxStatus.SENDING)
    twilio.add_message(to=s.VENDOR_NUMBER, sender=s.OUR_NUMBER, body=row.payload["body"], created=timezone.now())
    result, _ = s.dispatch(run, episode, "send_sms", s.SMS)

    assert result["status"] == "sent"
    assert s.creates(twilio) == 0
    adopted = OutboxMessage.objects.get(pk=row.pk)
    assert adopted.status == OutboxStatus.SENT and adopted.provider_message_id == twilio.messages[0]["sid"]


def test_a_sending_row_the_provider_never_saw_is_sent_once(twilio):
    run, episode, row = _setup(twilio, status=OutboxStatus.SENDING)
    result, _ = s.dispatch(run, episode, "send_sms", s.SMS)

    assert result["status"] == "sent"
    assert s.creates(twilio) == 1
    assert OutboxMessage.objects.get(pk=row.pk).attempts == 2


def test_a_failed_lookup_makes_the_row_uncertain_and_asks_a_human_without_sending(twilio):
    run, episode, row = _setup(twilio, status=OutboxStatus.SENDING)
    twilio.fail_with(500)
    epoch = h.claim(run)
    result, session = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    again, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)

    assert result["status"] == again["status"] == "uncertain"
    assert session.stop and session.outcome.escalated
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.UNCERTAIN
    escalation = Escalation.objects.get(run=run)
    assert escalation.kind == EscalationKind.UNCERTAIN_SEND and escalation.outbox_message_id == row.pk
    # What the lookup said is kept for the person who decides (the review queue shows it).
    lookup = escalation.context["provider_lookup"]
    assert lookup["said"].startswith("the provider could not be asked (1 lookup(s) failed")
    assert (lookup["found"], lookup["transient"], lookup["lookups"]) == (None, True, 1)
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN
    assert s.creates(twilio) == 0


@pytest.mark.parametrize(("outcome", "sends"), [("not_sent", 1), ("sent", 0)])
def test_a_human_settles_an_uncertain_send_and_the_next_episode_acts_on_it(twilio, outcome, sends):
    run, episode, row = _setup(twilio, status=OutboxStatus.SENDING)
    twilio.fail_with(500)
    epoch = h.claim(run)
    s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    twilio.fail_with(None)

    answer = escalations.resolve(Escalation.objects.get(run=run), outcome=outcome, via="admin")
    loop.run_episode(h.context(run, answer, epoch=epoch))
    loop.run_episode(h.context(run, answer, epoch=epoch))  # re-executed: still one send

    assert s.creates(twilio) == sends
    settled = OutboxMessage.objects.get(pk=row.pk)
    assert settled.status == OutboxStatus.SENT
    if sends:
        assert settled.provider_message_id == twilio.messages[0]["sid"]


def test_pending_rows_wait_while_the_send_window_is_closed_and_go_out_once_it_opens():
    night = datetime(2025, 3, 5, 4, 0, tzinfo=UTC)  # 22:00 in Chicago: quiet hours
    run = h.make_run(now=night)
    episode = h.add_episode(run, "event")
    row = _row(run, episode, status=OutboxStatus.PENDING)
    epoch = h.claim(run)

    assert tool_executor.flush_pending(h.context(run, episode, epoch=epoch)) == []
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.PENDING

    Run.objects.filter(pk=run.pk).update(virtual_now=night + timedelta(hours=12))
    [flushed] = tool_executor.flush_pending(h.context(run, episode, epoch=epoch))

    assert flushed.status == "sent" and OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.SENT
    assert SandboxMessage.objects.get().idem_key == row.idem_key
