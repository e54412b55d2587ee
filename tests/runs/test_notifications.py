import threading
from datetime import UTC, datetime, time, timedelta

import pytest
import time_machine
from django.db import connection, transaction

from connectors import identities
from runs import answers, compliance, dispatch, escalations, leases, notifications, outbox
from runs.models import Escalation, EscalationRoute, OutboxMessage, Run
from tests.connectors.conftest import (
    BOT_TOKEN,
    MAIL_DOMAIN,
    MAILGUN_KEY,
    SIGNING_SECRET,
    _lucia_urls,  # noqa: F401 (autouse)
    mailgun_server,  # noqa: F401
    slack_server,  # noqa: F401
)
from tests.factories import ContactFactory, OrganizationFactory, RunFactory

pytestmark = pytest.mark.django_db

OPS_CHANNEL = "C0OPS"
# 23:30 in Paris (UTC+1 in January): inside 22:00–07:00 quiet hours; they end at 06:00 UTC.
PARIS_NIGHT = datetime(2026, 1, 14, 22, 30, tzinfo=UTC)
PARIS_MORNING = datetime(2026, 1, 15, 6, 0, tzinfo=UTC)


@pytest.fixture
def routed(mailgun_server, slack_server):  # noqa: F811
    """An organization whose escalations go to ops@acme.test (from its Mailgun mailbox) and Slack C0OPS."""
    organization = OrganizationFactory(name="Acme")
    mailbox = identities.create_identity(
        organization, channel="email", address=f"lucia@{MAIL_DOMAIN}", display_name="Lucia",
        secret_values={"api_key": MAILGUN_KEY, "api_url": mailgun_server.api_url})
    workspace = identities.create_identity(
        organization, channel="slack", address="T0ACME", display_name="Lucia",
        secret_values={"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET,
                       "api_base_url": slack_server.base_url})
    EscalationRoute.objects.create(organization=organization, email_identity=mailbox, email_to="ops@acme.test",
                                   slack_identity=workspace, slack_channel=OPS_CHANNEL, timezone="Europe/Paris")
    return organization


def _open(run: Run, **fields) -> Escalation:
    epoch = leases.claim(run.pk, owner="test")
    try:
        with leases.fence(run.pk, epoch=epoch) as locked:
            return escalations.open_escalation(locked, **({"kind": "question", "prompt": "Pay the $25 fee?"} | fields))
    finally:
        leases.release(run.pk, epoch=epoch)


def _emails(server) -> list:
    return server.calls_to("/messages", method="POST")


def _posts(server) -> list:
    return server.calls_to("/chat.postMessage")


def test_a_new_escalation_is_announced_once_by_email_and_on_slack_with_its_options_as_buttons(
        routed, mailgun_server, slack_server):  # noqa: F811
    escalation = _open(RunFactory(organization=routed), options=["yes", "no"])

    dispatch.dispatch_due()
    dispatch.dispatch_due()

    [email] = _emails(mailgun_server)
    assert email.first("to") == "ops@acme.test" and f"#{escalation.pk}" in email.first("subject")
    assert "Pay the $25 fee?" in email.first("text")
    [post] = _posts(slack_server)
    body = post.json()
    assert body["channel"] == OPS_CHANNEL and "Pay the $25 fee?" in body["text"]
    buttons = body["blocks"][1]["elements"]
    escalation.refresh_from_db()
    typed = [f"{escalation.pk}:{option['name']}" for option in escalation.options]
    assert "resume" in [option["name"] for option in escalation.options]  # the typed options, one button each
    assert [button.get("value") for button in buttons] == [*typed, None]
    assert buttons[-1]["url"].endswith(f"/runs/escalation/{escalation.pk}/change/")
    rows = OutboxMessage.objects.filter(escalation=escalation)
    assert sorted(rows.values_list("channel", "status", "run_id")) == [("email", "sent", None), ("slack", "sent", None)]


def test_escalations_without_a_run_are_announced_too(routed, slack_server):  # noqa: F811
    escalations.open_unmatched(routed, inbound_message_id=12, prompt="A message nobody expected")
    escalations.raise_outage(routed.pk, channel="sms", error="503 from Twilio")

    dispatch.dispatch_due()

    texts = [post.json()["text"] for post in _posts(slack_server)]
    assert len(texts) == 2
    assert any("A message nobody expected" in text for text in texts)
    assert any("503 from Twilio" in text for text in texts)


def test_a_retried_creating_transaction_queues_one_notice_per_channel(routed, slack_server):  # noqa: F811
    run = RunFactory(organization=routed)
    escalation = _open(run)
    with pytest.raises(RuntimeError), transaction.atomic():
        notifications.announce_due()
        raise RuntimeError("the transaction failed after queueing")
    assert not OutboxMessage.objects.filter(escalation=escalation).exists()

    notifications.announce_due()
    notifications.announce_due()
    Escalation.objects.filter(pk=escalation.pk).update(notify_at=escalation.raised_at, notices_queued=0)
    notifications.announce_due()  # the same attempt again finds its rows by key
    dispatch.dispatch_due()

    assert OutboxMessage.objects.filter(escalation=escalation).count() == 2
    assert len(_posts(slack_server)) == 1


def test_a_notice_in_the_ops_teams_quiet_hours_is_held_then_sent_when_they_end(routed, slack_server):  # noqa: F811
    EscalationRoute.objects.filter(organization=routed).update(quiet_start=time(22), quiet_end=time(7))
    run = RunFactory(organization=routed)
    with time_machine.travel(PARIS_NIGHT, tick=False):
        escalation = _open(run)
        dispatch.dispatch_due()
    assert _posts(slack_server) == []
    held = OutboxMessage.objects.get(escalation=escalation, channel="slack")
    assert (held.status, held.not_before) == ("pending", PARIS_MORNING)

    with time_machine.travel(PARIS_MORNING - timedelta(minutes=1), tick=False):
        dispatch.dispatch_due()
    assert _posts(slack_server) == []
    with time_machine.travel(PARIS_MORNING + timedelta(seconds=1), tick=False):
        dispatch.dispatch_due()
        dispatch.dispatch_due()
    assert len(_posts(slack_server)) == 1


def test_an_escalation_unanswered_past_the_agents_sla_is_announced_once_more(routed, slack_server):  # noqa: F811
    run = RunFactory(organization=routed)
    run.plan["followup"]["escalation_sla_s"] = 3600
    run.save(update_fields=["plan"])
    start = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)  # 13:00 in Paris, no quiet hours set anyway
    with time_machine.travel(start, tick=False):
        escalation = _open(run)
        dispatch.dispatch_due()
    with time_machine.travel(start + timedelta(minutes=59), tick=False):
        dispatch.dispatch_due()
    assert len(_posts(slack_server)) == 1

    with time_machine.travel(start + timedelta(minutes=61), tick=False):
        dispatch.dispatch_due()
        dispatch.dispatch_due()
    with time_machine.travel(start + timedelta(days=3), tick=False):
        dispatch.dispatch_due()

    texts = [post.json()["text"] for post in _posts(slack_server)]
    assert len(texts) == 2 and texts[1].startswith("Still waiting") and f"#{escalation.pk}" in texts[1]
    assert Escalation.objects.get(pk=escalation.pk).notify_at is None


def test_an_answered_escalation_is_not_announced_again(routed, slack_server):  # noqa: F811
    run = RunFactory(organization=routed)
    start = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        escalation = _open(run)
        dispatch.dispatch_due()
        answers.answer(escalation, option="resume", via="admin")
    with time_machine.travel(start + timedelta(days=1), tick=False):
        dispatch.dispatch_due()

    assert len(_posts(slack_server)) == 1


def test_notices_are_no_contacts_outreach_and_count_against_no_cap(routed, mailgun_server):  # noqa: F811
    run = RunFactory(organization=routed)
    ContactFactory(run=run, role="vendor", email="ops@acme.test")
    _open(run)
    dispatch.dispatch_due()

    assert len(_emails(mailgun_server)) == 1
    now = datetime.now(tz=UTC)
    assert compliance.recent_send_times(run, recipient="ops@acme.test", since=now - timedelta(days=1),
                                    until=now + timedelta(minutes=1)) == []
    assert outbox.unsettled_for(run.pk) == [] and not run.outbox.exists()


def test_a_simulated_runs_questions_reach_nobody(slack_server):  # noqa: F811
    organization = OrganizationFactory(slug="acme-sim")
    run = RunFactory(organization=organization, sim=True)
    escalation = _open(run)
    dispatch.dispatch_due()

    assert Escalation.objects.get(pk=escalation.pk).notify_at is None
    assert not OutboxMessage.objects.filter(escalation=escalation).exists()


def test_a_failing_notice_pass_never_holds_back_the_timers(routed, monkeypatch):
    from tests.factories import EpisodeFactory

    run = RunFactory(organization=routed)
    EpisodeFactory(run=run, due_at=datetime.now(tz=UTC) - timedelta(minutes=1))

    def broken(**_):
        raise RuntimeError("a bug in the notice pass")

    monkeypatch.setattr(notifications, "notify_due", broken)
    assert dispatch.dispatch_due() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_dispatchers_send_each_notice_once(routed, slack_server):  # noqa: F811
    escalation = _open(RunFactory(organization=routed))
    barrier = threading.Barrier(2)

    def dispatcher():
        try:
            barrier.wait()
            for _ in range(3):
                notifications.notify_due(budget_s=1)
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(_posts(slack_server)) == 1
    assert OutboxMessage.objects.filter(escalation=escalation, channel="slack").get().status == "sent"


@pytest.mark.parametrize("posted_before_dying", [True, False])
def test_a_notice_whose_sender_died_mid_send_is_looked_up_and_never_posted_twice(
        routed, slack_server, posted_before_dying):  # noqa: F811
    EscalationRoute.objects.filter(organization=routed).update(email_identity=None, email_to="")
    start = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        escalation = _open(RunFactory(organization=routed))
        notifications.announce_due()
        [claimed] = outbox.claim_notices(batch=5)  # the sender dies here, before or after Slack took the post
        if posted_before_dying:
            slack_server.post(OPS_CHANNEL, text="notice", metadata={
                "event_type": "lucia_send", "event_payload": {"idem_key": claimed.idem_key}})
        dispatch.dispatch_due()
    assert OutboxMessage.objects.get(pk=claimed.pk).status == "sending"  # a live sender may still be at it

    with time_machine.travel(start + timedelta(minutes=10), tick=False):
        dispatch.dispatch_due()
        dispatch.dispatch_due()

    row = OutboxMessage.objects.get(escalation=escalation)
    assert row.status == "sent"
    posted = [message for message in slack_server.channels[OPS_CHANNEL]
              if (message.get("metadata") or {}).get("event_payload", {}).get("idem_key") == row.idem_key]
    assert len(posted) == 1
    assert len(_posts(slack_server)) == (0 if posted_before_dying else 1)


def test_the_studio_shows_notices_in_the_outbox(routed, client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    escalation = _open(RunFactory(organization=routed))
    notifications.announce_due()
    notice = OutboxMessage.objects.filter(escalation=escalation).first()

    listing = client.get("/admin/runs/outboxmessage/")
    page = client.get(f"/admin/runs/outboxmessage/{notice.pk}/change/")
    escalation_page = client.get(f"/admin/runs/escalation/{escalation.pk}/change/")

    assert (listing.status_code, page.status_code, escalation_page.status_code) == (200, 200, 200)
    assert notice.idem_key in page.content.decode() or notice.recipient in page.content.decode()
