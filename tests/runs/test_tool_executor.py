"""The ToolExecutor against fake providers: identities, sim isolation, permanent and transient errors, caps."""

import time
from datetime import UTC, datetime, timedelta
from email.utils import parseaddr

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from connectors import identities, message_ids
from connectors.models import InboundMessage, SandboxMessage, Suppression
from runs import inbound_routing, leases, tool_executor, tools
from runs.llm.base import ToolCall
from runs.models import Escalation, JournalEntry, OutboxMessage, OutboxStatus, Run, RunStatus
from runs.outbox import idem_key
from tests.factories import OrganizationFactory
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _urls(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"
    settings.LUCIA_LLM = "scripted"


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


@pytest.fixture
def mailgun():
    server = s.start_mailgun()
    yield server
    server.stop()


def test_an_sms_goes_out_once_through_the_org_identity_with_the_key_in_the_callback(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    result, _ = s.dispatch(run, episode, "send_sms", s.SMS)

    assert result["ok"] is True and result["status"] == "sent"
    [create] = twilio.calls_to("/Messages.json", method="POST")
    row = OutboxMessage.objects.get(run=run)
    assert create.first("To") == s.VENDOR_NUMBER and create.first("From") == s.OUR_NUMBER
    assert create.first("Body") == row.payload["body"] and row.payload["body"].endswith("Reply STOP to opt out.")
    assert create.first("StatusCallback").endswith(f"?k={row.idem_key}")
    assert row.status == OutboxStatus.SENT and row.provider_message_id == twilio.messages[0]["sid"]
    assert row.attempts == 1 and row.sent_at is not None


def test_an_email_carries_reply_to_message_id_and_threads_on_the_last_inbound(mailgun):
    run = s.real_run()
    s.email_identity(run.organization, mailgun)
    stored = InboundMessage.objects.create(
        organization=run.organization, channel="email", provider_id="<v1@vendor.test>", from_address=h.VENDOR_EMAIL,
        text="which form?", headers={"Message-ID": "<v1@vendor.test>", "References": "<v0@vendor.test>",
                                     "in_reply_to": "<v0@vendor.test>", "references": ["<v0@vendor.test>"]},
    )
    h.add_episode(run, "inbound", inbound_routing.episode_payload(stored))  # what routing gives the run
    episode = h.add_episode(run, "event")
    s.dispatch(run, episode, "send_email", s.EMAIL)

    [post] = mailgun.calls_to(f"/v3/{s.MAIL_DOMAIN}/messages")
    row = OutboxMessage.objects.get(run=run)
    assert post.first("h:Message-Id") == message_ids.message_id_for(row.idem_key)
    assert parseaddr(post.first("h:Reply-To"))[1] == message_ids.reply_address(run.pk)
    assert post.first("h:In-Reply-To") == "<v1@vendor.test>"
    assert post.first("h:References") == "<v0@vendor.test> <v1@vendor.test>"
    assert row.status == OutboxStatus.SENT and row.provider_message_id


def test_a_held_email_sent_by_a_later_episode_threads_on_the_inbound_before_its_own_episode(mailgun):
    """The row's own episode bounds the thread (a resend threads as the first try did), and its seq comes with the
    episode's facts: no query looks it up."""
    run = s.real_run()
    s.email_identity(run.organization, mailgun)

    def inbound(message_id: str) -> None:
        stored = InboundMessage.objects.create(
            organization=run.organization, channel="email", provider_id=message_id, from_address=h.VENDOR_EMAIL,
            text="which form?", headers={"Message-ID": message_id})
        h.add_episode(run, "inbound", inbound_routing.episode_payload(stored))

    inbound("<v1@vendor.test>")
    decided = h.add_episode(run, "event")
    key = idem_key(run_id=run.pk, episode_id=decided.pk, task_key="collect_w9", tool="send_email",
                   recipient=h.VENDOR_EMAIL, ordinal=0)
    OutboxMessage.objects.create(
        idem_key=key, run=run, episode=decided, task_key="collect_w9", tool="send_email", channel="email",
        recipient=h.VENDOR_EMAIL, payload={"subject": "W-9", "body": "The W-9, please."}, status=OutboxStatus.PENDING,
        created_at=timezone.now(), not_before=timezone.now() - timedelta(minutes=1))  # held, and its time has come
    inbound("<v2@vendor.test>")  # after the row's episode: not what it answers
    flush = h.add_episode(run, "event")
    epoch = h.claim(run)

    with CaptureQueriesContext(connection) as queries:
        [outcome] = tool_executor.flush_pending(h.context(run, flush, epoch=epoch))

    assert outcome.status == "sent"
    [post] = mailgun.calls_to(f"/v3/{s.MAIL_DOMAIN}/messages")
    assert post.first("h:In-Reply-To") == "<v1@vendor.test>"
    assert not [query for query in queries.captured_queries if '"runs_episode"."seq" AS "seq"' in query["sql"]]


def test_a_sim_run_never_calls_the_real_provider_of_its_organization(twilio):
    run = h.make_run(plan=s.open_plan())
    s.sms_identity(run.organization, twilio)  # a real number with working credentials
    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_sms", s.SMS)

    assert result["status"] == "sent"
    assert twilio.requests == []
    stored = SandboxMessage.objects.get()
    assert stored.idem_key == OutboxMessage.objects.get(run=run).idem_key and stored.recipient == s.VENDOR_NUMBER


class _Stall:
    """A worker stopped at the fault point before its provider call (a SIGSTOP, a long pause): its monotonic clock
    moves on, and `meanwhile` the run may pass to a successor: `taken_over` once the lease expired (a new epoch), or
    `claim_lost`: a database crash took this worker's claim back and the next claim handed out the same epoch to
    another worker (starts commit unflushed: runs.episode_loads)."""

    def __init__(self, run_id: int, *, meanwhile: str) -> None:
        self.run_id, self.meanwhile, self.offset = run_id, meanwhile, 0.0

    def point(self, name: str) -> None:
        if name != "before_provider_call":
            return
        self.offset = 600.0
        if self.meanwhile == "taken_over":
            Run.objects.filter(pk=self.run_id).update(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
            assert leases.claim(self.run_id, owner="successor") is not None
        elif self.meanwhile == "claim_lost":
            Run.objects.filter(pk=self.run_id).update(lease_owner="successor")

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


@pytest.mark.parametrize("meanwhile", ["nothing", "taken_over", "claim_lost"])
def test_a_worker_stalled_before_its_provider_call_sends_only_if_its_lease_is_still_its_own(
        twilio, monkeypatch, meanwhile):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    stall = _Stall(run.pk, meanwhile=meanwhile)
    # Its fenced write is no longer recent (runs.tool_executor._confirm_lease): the lease is read again.
    monkeypatch.setattr(tool_executor, "faults", stall)
    monkeypatch.setattr(tool_executor, "time", stall)

    if meanwhile == "nothing":
        result, _ = s.dispatch(run, episode, "send_sms", s.SMS, owner="worker")
        assert result["status"] == "sent" and s.creates(twilio) == 1
    else:
        with pytest.raises(leases.LeaseLost):
            s.dispatch(run, episode, "send_sms", s.SMS, owner="worker")
        assert s.creates(twilio) == 0
        assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENDING  # the successor looks it up
        assert Run.objects.get(pk=run.pk).lease_owner == "successor"


def test_a_real_run_without_an_identity_gets_an_error_result_and_writes_no_row():
    run = s.real_run()
    result, session = s.dispatch(run, h.add_episode(run, "start"), "send_sms", s.SMS)

    assert result["ok"] is False and result["status"] == "unavailable" and "sms" in result["error"]
    assert not OutboxMessage.objects.exists()
    assert JournalEntry.objects.filter(run=run, kind="note", data__text="no active sms identity").exists()
    assert not session.stop  # the model may try another channel


def test_opted_out_21610_fails_the_row_suppresses_the_number_and_is_never_retried(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    twilio.refuse[s.VENDOR_NUMBER] = 21610
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    first, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    again, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)  # the episode re-executed

    assert first == again and first["status"] == "failed"  # a re-executed episode reads the same result
    row = OutboxMessage.objects.get(run=run)
    assert row.status == OutboxStatus.FAILED and "21610" in row.error
    assert Suppression.objects.get(organization=run.organization, channel="sms").address == s.VENDOR_NUMBER
    assert s.creates(twilio) == 1
    # Another run of the organization is now blocked before any provider call.
    other = s.real_run(organization=run.organization)
    blocked, _ = s.dispatch(other, h.add_episode(other, "start"), "send_sms", s.SMS)
    assert blocked["status"] == "blocked" and s.creates(twilio) == 1


def test_invalid_number_21211_fails_without_suppressing(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    twilio.refuse[s.VENDOR_NUMBER] = 21211
    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_sms", s.SMS)

    assert result["status"] == "failed"
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.FAILED
    assert not Suppression.objects.exists()


def test_a_suppressed_number_is_blocked_before_any_row_or_call(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    Suppression.objects.create(organization=run.organization, channel="sms", address=s.VENDOR_NUMBER, reason="stop")
    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_sms", s.SMS)

    assert result["status"] == "blocked"
    assert not OutboxMessage.objects.exists() and twilio.requests == []
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="suppressed").exists()


@pytest.mark.parametrize("arrives", ["stop", "handoff"])
def test_a_stop_or_a_takeover_after_the_episode_read_its_facts_still_blocks_the_send(twilio, arrives):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    ctx = h.context(run, episode, epoch=h.claim(run))
    assert not ctx.facts.is_suppressed(channel="sms", address=s.VENDOR_NUMBER) and not ctx.facts.handed_off
    # While the model thinks: the contact texts STOP, or a human takes the run over.
    if arrives == "stop":
        Suppression.objects.create(organization=run.organization, channel="sms", address=s.VENDOR_NUMBER,
                                   reason="stop")
    else:
        Escalation.objects.create(organization=run.organization, run=run, kind="handoff", prompt="mine now")

    result = tools.dispatch(ctx, ToolCall(id="call-1", name="send_sms", arguments=s.SMS), session=tools.ToolSession())

    assert result["status"] == "blocked"
    assert not OutboxMessage.objects.exists() and twilio.requests == []
    rule = "suppressed" if arrives == "stop" else "handled_by_human"
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule=rule).exists()


def test_a_transient_refusal_leaves_the_row_pending_and_the_retry_sends_it_once(twilio):
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    twilio.fail_with(429)
    refused, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    row = OutboxMessage.objects.get(run=run)
    assert refused["status"] == "held" and row.status == OutboxStatus.PENDING and row.not_before is not None

    twilio.fail_with(None)
    with time_machine.travel(row.not_before + timedelta(seconds=1)):
        result, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)

    assert result["status"] == "sent"
    assert len(twilio.messages) == 1
    assert OutboxMessage.objects.get(run=run).attempts == 2
    assert not Escalation.objects.exists()


def test_a_5xx_whose_outcome_nobody_can_tell_becomes_uncertain_without_a_second_send(twilio, settings):
    settings.LUCIA_SEND_LOOKUP_TRIES = 1  # the first lookup that cannot answer asks a human
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    twilio.fail_with(502)  # the create and the lookup's list both fail
    held, _ = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)
    assert held["status"] == "held" and twilio.calls_to("/Messages.json", method="GET") == []

    with time_machine.travel(OutboxMessage.objects.get(run=run).not_before + timedelta(seconds=1)):
        result, session = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)

    assert result["status"] == "uncertain" and session.stop
    row = OutboxMessage.objects.get(run=run)
    assert row.status == OutboxStatus.UNCERTAIN
    escalation = Escalation.objects.get(run=run, kind="uncertain_send")
    assert escalation.outbox_message_id == row.pk and [o["name"] for o in escalation.options] == ["sent", "not_sent"]
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN
    assert s.creates(twilio) == 1


def test_per_contact_caps_count_every_run_of_the_organization_and_defer():
    plan = s.open_plan(per_contact_caps={"per_day": 2, "per_week": 6})
    # A real run in a simulation organization: the only kind that may hold a sandbox identity.
    first = s.real_run(plan, organization=OrganizationFactory(slug="caps-sim"))
    second = s.real_run(plan, organization=first.organization)
    identities.create_identity(first.organization, channel="email", address="ap@acme.test", sandbox=True)
    episode = h.add_episode(first, "start")
    epoch = h.claim(first)
    session = tools.ToolSession()
    s.dispatch(first, episode, "send_email", s.EMAIL, epoch=epoch, session=session)
    s.dispatch(first, episode, "send_email", {**s.EMAIL, "body": "and the 1099"}, epoch=epoch, session=session)

    result, later = s.dispatch(second, h.add_episode(second, "start"), "send_email", s.EMAIL)

    assert result["status"] == "held"
    sent_at = OutboxMessage.objects.filter(run=first).order_by("created_at").first().created_at
    assert later.outcome.held_until >= sent_at + timedelta(days=1)
    assert later.outcome.held_until == datetime.fromisoformat(result["held_until"])
    assert later.outcome.followup_override is None
    held = OutboxMessage.objects.get(run=second)
    assert held.status == "pending" and held.not_before == later.outcome.held_until
    block = JournalEntry.objects.get(run=second, kind="policy_block")
    assert block.data["rule"] == "per_contact_cap" and block.data["cap"] == "per_day"


def test_simulated_runs_count_only_their_own_sends_against_caps():
    plan = s.open_plan(per_contact_caps={"per_day": 2, "per_week": 6})
    first = h.make_run(plan=plan)
    second = h.make_run(plan=plan, organization=first.organization)
    episode = h.add_episode(first, "start")
    epoch = h.claim(first)
    session = tools.ToolSession()
    s.dispatch(first, episode, "send_email", s.EMAIL, epoch=epoch, session=session)
    s.dispatch(first, episode, "send_email", {**s.EMAIL, "body": "and the 1099"}, epoch=epoch, session=session)

    result, _ = s.dispatch(second, h.add_episode(second, "start"), "send_email", s.EMAIL)

    assert result["status"] == "sent"


def test_caps_ignore_other_organizations_and_sends_that_failed():
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 6})
    elsewhere = h.make_run(plan=plan)
    s.dispatch(elsewhere, h.add_episode(elsewhere, "start"), "send_email", s.EMAIL)
    run = h.make_run(plan=plan, organization=OrganizationFactory())
    failed = h.make_run(plan=plan, organization=run.organization)
    OutboxMessage.objects.create(
        idem_key=idem_key(run_id=failed.pk, episode_id=0, task_key="", tool="send_email", recipient=h.VENDOR_EMAIL,
                          ordinal=0),
        run=failed, episode=h.add_episode(failed, "start"), tool="send_email", channel="email",
        recipient=h.VENDOR_EMAIL, status=OutboxStatus.FAILED, created_at=failed.virtual_now,
    )

    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_email", s.EMAIL)

    assert result["status"] == "sent"
