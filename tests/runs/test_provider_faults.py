"""Sends under provider faults, with the real Twilio client against the local fake (and a closed port).

Nothing left the process → pending, retried after a backoff, no human. Outcome unknown → no resend before
a lookup after the settle window (from the attempt) says "not found". An outage → one alert per
organization and channel. A lookup matched on the body alone never adopts another send's message.
"""

import socket
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from connectors import identities, twilio_client
from runs import outbox
from runs.models import Escalation, EscalationStatus, OutboxMessage, OutboxStatus, Run, RunStatus
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db

BODY = "Hi Dana, the W-9 please. Reply STOP to opt out."


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_SEND_SETTLE_SECONDS = 120
    settings.LUCIA_SEND_RETRY_SECONDS = 30
    settings.LUCIA_SEND_LOOKUP_TRIES = 3


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


def closed_port_url() -> str:
    """A local port nothing listens on: connecting is refused, so nothing can leave the process."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _point_at(identity, url: str) -> None:
    identities.set_secrets(identity, secret_values={"account_sid": s.ACCOUNT_SID, "auth_token": s.AUTH_TOKEN,
                                                    "api_base_url": url})


def _send(run, episode, epoch):
    result, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    return result


def _row(run) -> OutboxMessage:
    return OutboxMessage.objects.get(run=run)


def _later(row: OutboxMessage, seconds: float = 1):
    """Travel to just after the row's `not_before` (the wall clock real runs use)."""
    return time_machine.travel(row.not_before + timedelta(seconds=seconds))


def _outages(**filters):
    return Escalation.objects.filter(kind="provider_outage", **filters)


def test_a_refused_connection_keeps_the_row_pending_and_sends_it_after_the_backoff_without_a_human(twilio):
    run = s.real_run()
    identity = s.sms_identity(run.organization, twilio)
    _point_at(identity, closed_port_url())
    episode, epoch = h.add_episode(run, "start"), h.claim(run)

    result = _send(run, episode, epoch)

    row = _row(run)
    assert result["status"] == "held"
    assert (row.status, row.attempts) == (OutboxStatus.PENDING, 1)
    assert "unreachable" in row.error
    assert 25 <= (row.not_before - row.attempted_at).total_seconds() <= 31
    assert not Escalation.objects.exists()  # neither uncertain nor escalated: it never left
    assert Run.objects.get(pk=run.pk).status != RunStatus.WAITING_HUMAN

    _point_at(identity, twilio.url)
    assert _send(run, episode, epoch)["status"] == "held"  # the backoff has not passed: nothing tried
    assert s.creates(twilio) == 0
    with _later(row):
        assert _send(run, episode, epoch)["status"] == "sent"
    assert len(twilio.messages) == 1 and _row(run).attempts == 2


def test_a_provider_outage_raises_one_alert_per_organization_and_channel_and_it_clears_when_sends_resume(twilio):
    plan = s.open_plan(per_contact_caps={"per_day": 10, "per_week": 10})  # three runs chase the same person
    first = s.real_run(plan)
    runs = [first, *(s.real_run(plan, organization=first.organization) for _ in range(2))]
    identity = s.sms_identity(first.organization, twilio)
    _point_at(identity, closed_port_url())
    work = [(run, h.add_episode(run, "start"), h.claim(run)) for run in runs]
    for run, episode, epoch in work:
        _send(run, episode, epoch)
    with _later(_row(first)):
        for run, episode, epoch in work:
            assert _send(run, episode, epoch)["status"] == "held"  # the second failure of each

    [alert] = _outages()
    assert (alert.status, alert.channel, alert.run_id, alert.organization_id) == (
        EscalationStatus.OPEN, "sms", None, first.organization_id)
    assert not Escalation.objects.exclude(pk=alert.pk).exists()  # no escalation per message
    assert {row.status for row in OutboxMessage.objects.all()} == {OutboxStatus.PENDING}

    _point_at(identity, twilio.url)
    with time_machine.travel(timezone.now() + timedelta(minutes=5)):
        for run, episode, epoch in work:
            assert _send(run, episode, epoch)["status"] == "sent"
    assert len(twilio.messages) == 3
    assert _outages(status=EscalationStatus.OPEN).count() == 0


@pytest.mark.parametrize("fault", ["timeout", "reset"])
def test_an_unknown_outcome_is_looked_up_only_after_the_settle_window_and_adopted(twilio, monkeypatch, fault):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode, epoch = h.add_episode(run, "start"), h.claim(run)
    if fault == "timeout":
        monkeypatch.setattr(twilio_client, "REQUEST_TIMEOUT_S", 0.3)
        twilio.stall_after_processing(1.0)  # Twilio took it, the answer comes too late
    else:
        twilio.drop_after_processing()  # Twilio took it, the connection drops before the answer

    result = _send(run, episode, epoch)
    twilio.healthy()

    row = _row(run)
    assert result["status"] == "held" and row.status == OutboxStatus.SENDING
    assert len(twilio.messages) == 1 and row.attempted_at is not None
    assert 115 <= (row.not_before - row.attempted_at).total_seconds() <= 121
    assert _send(run, episode, epoch)["status"] == "held"  # inside the window: no lookup, no resend
    assert twilio.calls_to("/Messages.json", method="GET") == []

    with _later(row):
        assert _send(run, episode, epoch)["status"] == "sent"
    assert s.creates(twilio) == 1
    assert _row(run).provider_message_id == twilio.messages[0]["sid"]


def test_a_5xx_is_resent_only_after_a_lookup_past_the_window_says_not_found(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode, epoch = h.add_episode(run, "start"), h.claim(run)
    twilio.fail_with(502)  # refused with a 5xx: the outcome is unknown to the client
    assert _send(run, episode, epoch)["status"] == "held"
    twilio.fail_with(None)
    row = _row(run)

    with time_machine.travel(row.attempted_at + timedelta(seconds=100)):  # a slow acceptance could still show
        assert _send(run, episode, epoch)["status"] == "held"
    assert s.creates(twilio) == 1 and twilio.calls_to("/Messages.json", method="GET") == []
    with _later(row):
        assert _send(run, episode, epoch)["status"] == "sent"

    assert s.creates(twilio) == 2 and len(twilio.messages) == 1
    assert len(twilio.calls_to("/Messages.json", method="GET")) == 1


def test_a_lookup_the_provider_cannot_answer_for_now_is_asked_again_then_a_human_decides(twilio, settings):
    settings.LUCIA_SEND_LOOKUP_TRIES = 2
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode, epoch = h.add_episode(run, "start"), h.claim(run)
    twilio.fail_with(503)
    _send(run, episode, epoch)
    with _later(_row(run)):
        assert _send(run, episode, epoch)["status"] == "held"  # first lookup: 503, asked again later
    row = _row(run)
    assert (row.status, row.lookups) == (OutboxStatus.SENDING, 1)
    assert _outages(status=EscalationStatus.OPEN).count() == 1
    assert not Escalation.objects.filter(kind="uncertain_send").exists()

    with _later(row):
        assert _send(run, episode, epoch)["status"] == "uncertain"
    assert _row(run).status == OutboxStatus.UNCERTAIN
    assert Escalation.objects.filter(kind="uncertain_send", run=run).count() == 1
    assert s.creates(twilio) == 1


def _sending_row(run, episode, *, body: str = BODY, minutes_ago: int = 10) -> OutboxMessage:
    """The row an earlier attempt left `sending`, past its settle window."""
    key = outbox.idem_key(run_id=run.pk, episode_id=episode.pk, task_key="collect_w9", tool="send_sms",
                          recipient=s.VENDOR_NUMBER, ordinal=0)
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return OutboxMessage.objects.create(
        idem_key=key, run=run, episode=episode, task_key="collect_w9", tool="send_sms", channel="sms",
        recipient=s.VENDOR_NUMBER, payload={"body": body}, status=OutboxStatus.SENDING, attempts=1,
        created_at=at, attempted_at=at,
    )


def test_an_sms_lookup_never_adopts_another_runs_message_with_the_same_text(twilio):
    ours = s.real_run()
    theirs = s.real_run(organization=ours.organization)
    s.sms_identity(ours.organization, twilio)
    # The other run sent the same text to the same person, and recorded it.
    twilio.add_message(to=s.VENDOR_NUMBER, sender=s.OUR_NUMBER, body=BODY, created=timezone.now())
    other = _sending_row(theirs, h.add_episode(theirs, "start"))
    OutboxMessage.objects.filter(pk=other.pk).update(status=OutboxStatus.SENT,
                                                      provider_message_id=twilio.messages[0]["sid"])
    episode = h.add_episode(ours, "start")
    row = _sending_row(ours, episode)

    assert _send(ours, episode, h.claim(ours))["status"] == "sent"

    assert s.creates(twilio) == 1  # ours was never sent: the lookup found only theirs
    assert OutboxMessage.objects.get(pk=row.pk).provider_message_id == twilio.messages[1]["sid"]


def test_an_sms_lookup_cannot_tell_when_another_send_of_the_same_text_is_unresolved(twilio):
    ours = s.real_run()
    theirs = s.real_run(organization=ours.organization)
    s.sms_identity(ours.organization, twilio)
    twilio.add_message(to=s.VENDOR_NUMBER, sender=s.OUR_NUMBER, body=BODY, created=timezone.now())
    _sending_row(theirs, h.add_episode(theirs, "start"))  # theirs or ours: nobody can say
    episode = h.add_episode(ours, "start")
    row = _sending_row(ours, episode)

    assert _send(ours, episode, h.claim(ours))["status"] == "uncertain"

    assert s.creates(twilio) == 0
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.UNCERTAIN


def test_a_voice_lookup_never_adopts_a_call_another_send_recorded(twilio):
    plan = s.every_channel_plan()
    ours = s.real_run(plan)
    theirs = s.real_run(plan, organization=ours.organization)
    s.voice_identity(ours.organization, twilio)
    twilio.add_call(to=s.VENDOR_NUMBER, sender=s.OUR_NUMBER, created=timezone.now())
    other = _sending_row(theirs, h.add_episode(theirs, "start"))
    OutboxMessage.objects.filter(pk=other.pk).update(status=OutboxStatus.SENT, channel="voice", tool="place_call",
                                                      provider_message_id=twilio.calls[0]["sid"])
    episode = h.add_episode(ours, "start")
    key = outbox.idem_key(run_id=ours.pk, episode_id=episode.pk, task_key="collect_w9", tool="place_call",
                          recipient=s.VENDOR_NUMBER, ordinal=0)
    at = timezone.now() - timedelta(minutes=10)
    row = OutboxMessage.objects.create(
        idem_key=key, run=ours, episode=episode, task_key="collect_w9", tool="place_call", channel="voice",
        recipient=s.VENDOR_NUMBER, payload={"brief": "Ask Dana for the W-9"}, status=OutboxStatus.SENDING,
        attempts=1, created_at=at, attempted_at=at)

    result, _ = s.dispatch(ours, episode, "place_call", {"to_role": "vendor", "brief": "Ask Dana for the W-9"},
                           epoch=h.claim(ours))

    assert result["status"] == "sent"
    assert len(twilio.calls) == 2  # the lookup found only their call, so ours was placed
    assert OutboxMessage.objects.get(pk=row.pk).provider_message_id == twilio.calls[1]["sid"]
