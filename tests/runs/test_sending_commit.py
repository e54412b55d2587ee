"""The write before a send waits for the disk only when the send leaves Lucia (connectors.base.Connector
.records_in_database): a sandbox send is a row of this database, committed after that write, so no crash can keep
it and lose the row `sending` that precedes it (runs.leases.unflushed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from connectors import identities
from connectors.models import SandboxMessage
from runs import leases, outbox, tool_executor
from runs.models import EpisodeKind, OutboxMessage
from tests.commit_settings import statements_run, synchronous_commit
from tests.factories import OrganizationFactory
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db(transaction=True)

UNFLUSHED = "set_config('synchronous_commit', 'off', true)"


def _opening_statement(run, name: str, arguments: dict) -> str:
    """The one statement that wrote the send's row `sending`, as a tool call through the runtime made it."""
    episode = h.add_episode(run, EpisodeKind.START)
    (opened,) = statements_run(lambda: s.dispatch(run, episode, name, arguments),
                               picked=lambda sql: "INSERT INTO runs_outboxmessage" in sql)
    assert OutboxMessage.objects.get(run=run).status == "sent"
    return opened[0]


def test_the_row_before_a_sandbox_send_commits_without_waiting_for_the_disk():
    # A real run in a simulation organization: the only kind that may hold a sandbox identity.
    run = s.real_run(organization=OrganizationFactory(slug="sending-sim", sandbox=True))
    identities.create_identity(run.organization, channel="email", address="ap@acme.test", sandbox=True)

    assert UNFLUSHED in _opening_statement(run, "send_email", s.EMAIL)
    assert SandboxMessage.objects.count() == 1


def test_a_held_sandbox_send_that_goes_out_later_starts_without_waiting_for_the_disk():
    run = s.real_run(organization=OrganizationFactory(slug="sending-held-sim", sandbox=True))
    identities.create_identity(run.organization, channel="email", address="ap@acme.test", sandbox=True)
    episode = h.add_episode(run, "flush")
    OutboxMessage.objects.create(
        idem_key=outbox.idem_key(run_id=run.pk, episode_id=episode.pk, task_key="", tool="send_email",
                                 recipient=h.VENDOR_EMAIL, ordinal=0),
        run=run, episode=episode, tool="send_email", channel="email", recipient=h.VENDOR_EMAIL,
        payload={"subject": "Your W-9", "body": "Could you send your W-9?"},
        created_at=timezone.now() - timedelta(hours=2), not_before=timezone.now() - timedelta(hours=1))
    ctx = h.context(run, episode, epoch=h.claim(run))

    (began,) = statements_run(lambda: tool_executor.flush_pending(ctx),
                              picked=lambda sql: "SET status = 'sending'" in sql)

    assert UNFLUSHED in began[0]
    assert OutboxMessage.objects.get(run=run).status == "sent"
    assert SandboxMessage.objects.count() == 1


def test_the_row_before_a_provider_s_send_waits_for_the_disk():
    twilio = s.start_twilio()
    try:
        run = s.real_run()
        s.sms_identity(run.organization, twilio)

        assert UNFLUSHED not in _opening_statement(run, "send_sms", s.SMS)
        assert s.creates(twilio) == 1
    finally:
        twilio.stop()


def test_the_unflushed_rider_turns_the_commit_off_for_its_statement_s_transaction_only():
    run = h.make_run()
    epoch = h.claim(run)
    rider = leases.unflushed()
    name = rider.returning.rpartition(" AS ")[2]

    written = leases.write(run.pk, epoch=epoch, rider=rider)

    assert getattr(written, name) == "off"  # as the statement left its transaction
    assert synchronous_commit() == "on"


def test_inside_a_caller_s_transaction_the_unflushed_rider_is_nothing():
    with transaction.atomic():
        assert leases.unflushed() == leases.Rider()
