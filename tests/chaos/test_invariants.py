"""The chaos run's invariant checks catch what they are meant to catch (each is shown failing, then holding)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chaos import invariants
from chaos.provider import ChaosTwilio
from connectors.models import SandboxMessage
from runs.models import EpisodeStatus, Escalation, OutboxMessage
from tests.factories import EpisodeFactory, RunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def twilio():
    server = ChaosTwilio().start()
    yield server
    server.stop()


def _accepted(twilio: ChaosTwilio, *, key: str, to: str = "+15556000001", body: str = "W-9 please (1)") -> str:
    sid = f"SM{len(twilio.messages):032x}"
    twilio.messages.append({"sid": sid, "to": to, "body": body,
                            "_status_callback": f"https://lucia.example.com/hooks/twilio/status/?k={key}"})
    return sid


def _row(run, *, key: str, status: str = "sent", sid: str = "", body: str = "W-9 please (1)",
         channel: str = "sms") -> OutboxMessage:
    episode = EpisodeFactory(run=run, status=EpisodeStatus.DONE)
    return OutboxMessage.objects.create(
        idem_key=key, run=run, episode=episode, tool=f"send_{channel}", channel=channel, recipient="+15556000001",
        payload={"body": body}, status=status, provider_message_id=sid, created_at=timezone.now())


def test_a_key_the_fake_accepted_twice_is_a_violation(twilio):
    _accepted(twilio, key="k1")
    assert invariants.no_key_sent_twice(twilio).held

    _accepted(twilio, key="k1", body="another text")

    check = invariants.no_key_sent_twice(twilio)
    assert not check.held and "k1" in check.detail


def test_the_same_text_to_the_same_recipient_twice_is_a_violation_at_the_fake_and_in_the_outbox(twilio):
    run = RunFactory()
    _row(run, key="k1", sid=_accepted(twilio, key="k1"))
    assert invariants.no_text_sent_twice(twilio).held

    _row(run, key="k2", sid=_accepted(twilio, key="k2"))

    check = invariants.no_text_sent_twice(twilio)
    assert not check.held and "outbox (" in check.detail and "+15556000001" in check.detail


def test_a_message_at_the_fake_without_its_outbox_row_is_a_violation(twilio):
    run = RunFactory()
    _row(run, key="k1", sid=_accepted(twilio, key="k1"))
    assert invariants.provider_matches_outbox(twilio).held

    _accepted(twilio, key="stray", body="never recorded")

    check = invariants.provider_matches_outbox(twilio)
    assert not check.held and "stray" in check.detail


def _stored(run, *, key: str, provider: str) -> None:
    SandboxMessage.objects.create(organization=run.organization, channel="email", idem_key=key,
                                  recipient="vendor@example.com", payload={}, provider_message_id=provider,
                                  created_at=timezone.now())


def test_a_sandbox_email_without_a_row_that_went_out_is_a_violation():
    run = RunFactory()
    _row(run, key="k1", channel="email", sid="sandbox-k1")
    _stored(run, key="k1", provider="sandbox-k1")
    _row(run, key="k2", channel="email", status="sending", body="other")
    _stored(run, key="k2", provider="sandbox-k2")
    assert invariants.sandbox_matches_outbox().held

    _row(run, key="k3", channel="email", status="pending", body="a third")
    _stored(run, key="k3", provider="sandbox-k3")

    check = invariants.sandbox_matches_outbox()
    assert not check.held and "k3" in check.detail


def test_a_sent_email_row_the_sandbox_never_stored_is_a_violation():
    run = RunFactory()
    _row(run, key="k1", channel="email", sid="sandbox-k1")

    check = invariants.sandbox_matches_outbox()
    assert not check.held and "k1" in check.detail


def test_an_outbox_row_left_pending_or_uncertain_without_one_open_escalation_is_a_violation():
    run = RunFactory()
    _row(run, key="k1")
    uncertain = _row(run, key="k2", status="uncertain", body="other")
    assert not invariants.outbox_settled().held

    Escalation.objects.create(organization=run.organization, run=run, kind="uncertain_send", prompt="Sent?",
                              outbox_message=uncertain)
    assert invariants.outbox_settled().held

    _row(run, key="k3", status="pending", body="third")
    check = invariants.outbox_settled()
    assert not check.held and "pending" in check.detail


def test_a_due_episode_after_a_stalled_settle_is_reported_as_a_wedge():
    run = RunFactory(sim=False)
    EpisodeFactory(run=run, due_at=timezone.now() + timedelta(minutes=5))
    assert invariants.nothing_due_unexecuted(settle_s=60, settled=True).held

    EpisodeFactory(run=run, due_at=timezone.now() - timedelta(seconds=5))

    check = invariants.nothing_due_unexecuted(settle_s=60, settled=False)
    assert not check.held and check.detail.startswith("wedged: 1 due episodes unexecuted, none finished for 60 s")


def test_a_run_waiting_on_a_follow_up_or_a_closed_escalation_is_not_at_rest():
    run = RunFactory(sim=False)
    Run = type(run)
    Run.objects.filter(pk=run.pk).update(status="waiting", wake_when="followup:w9")
    assert not invariants.runs_at_rest().held

    question = Escalation.objects.create(organization=run.organization, run=run, kind="stuck", prompt="Ladder spent")
    Run.objects.filter(pk=run.pk).update(status="waiting_human", wake_when=f"human:{question.pk}")
    assert invariants.runs_at_rest().held

    Escalation.objects.filter(pk=question.pk).update(status="resolved")
    assert not invariants.runs_at_rest().held
