"""The episode's start statement (runs.episode_loads) reads the contacts' addresses in SQL: they must come out as
connectors.addresses.normalize makes them, or a suppression (stored normalized) would not block a send."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction

from connectors import addresses
from connectors.models import Suppression
from runs import episode_loads, execution, leases, statements, worker
from runs.models import Episode, EpisodeKind, EpisodeStatus, Run
from tests.commit_settings import statements_run, synchronous_commit
from tests.factories import ContactFactory
from tests.runs import lock_waits, loop_helpers
from tests.runs.plan_helpers import plan_with_quiet_statistics

# Stored forms that validation lets through or older rows hold, with the channel they are read on.
STORED = [
    ("email", "email", "  Dana.Whitfield@Example.COM "),
    ("email", "email", "no-at-sign"),
    ("sms", "phone", "+1 (555) 555-0101"),
    ("sms", "phone", "+15555550199"),
    ("slack", "slack_user", " U0VENDOR "),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("channel", "column", "stored"), STORED)
def test_the_start_reads_each_contact_address_in_its_normal_form(channel, column, stored):
    run = loop_helpers.make_run()
    run.contacts.all().delete()
    ContactFactory(run=run, role="vendor", **{"email": "", "phone": "", "slack_user": "", column: stored})
    normal = addresses.normalize(channel, stored)
    for address in {normal, stored.strip()} - {""}:
        Suppression.objects.create(organization=run.organization, channel=channel, address=address, reason="stop")
    loop_helpers.add_episode(run, EpisodeKind.START)

    start = episode_loads.claim_and_start(run.pk, owner="test")

    suppressed = start.started.facts.suppressed
    assert suppressed == ({(channel, normal)} if normal else set())
    assert start.started.facts.is_suppressed(channel=channel, address=stored) is bool(normal)


@pytest.mark.django_db
def test_a_waiting_run_is_active_while_its_due_episode_runs():
    run = loop_helpers.make_run(status="waiting", wake_when="followup:1")
    loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)

    start = episode_loads.claim_and_start(run.pk, owner="test")

    assert start.started.episode.kind == EpisodeKind.FOLLOWUP
    assert start.run.status == "active" and start.run.wake_when is None
    assert Run.objects.filter(pk=run.pk, status="active", wake_when=None).exists()


@pytest.mark.django_db
def test_a_waiting_run_with_nothing_due_stays_waiting():
    run = loop_helpers.make_run(status="waiting", wake_when="followup:1")
    episode = loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)
    Episode.objects.filter(pk=episode.pk).update(due_at=run.virtual_now + timedelta(days=2))

    start = episode_loads.claim_and_start(run.pk, owner="test")

    assert start.run is not None and start.started is None
    assert Run.objects.filter(pk=run.pk, status="waiting", wake_when="followup:1").exists()


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_cancelled_while_the_claim_waited_for_the_run_row_is_not_started():
    run = loop_helpers.make_run()
    followup = loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)
    starts = []

    def reply() -> None:
        # A reply's writer: holds the run row, cancels the follow-up and records its own episode.
        Run.objects.select_for_update().get(pk=run.pk)
        Episode.objects.filter(pk=followup.pk).update(status=EpisodeStatus.CANCELLED)
        loop_helpers.add_episode(run, EpisodeKind.INBOUND)

    # The claim's statement begins before the reply commits.
    errors, blocked = lock_waits.behind_a_writer(
        reply, lambda: starts.append(episode_loads.claim_and_start(run.pk, owner="test")))

    assert errors == [] and blocked
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.CANCELLED
    [start] = starts
    assert start.started.episode is None or start.started.episode.kind == EpisodeKind.INBOUND
    assert execution.start_next(start, epoch=start.run.lease_epoch).episode.kind == EpisodeKind.INBOUND


@pytest.mark.django_db
def test_the_start_finds_the_run_s_episodes_by_run_not_among_every_run_s_due_ones():
    run = loop_helpers.make_run(status="waiting", wake_when="followup:1")
    loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)
    params = {**leases.claim_params(run.pk, owner="test"), **episode_loads._params(unflushed=False),
              "max_attempts": settings.LUCIA_EPISODE_MAX_ATTEMPTS}

    plan = plan_with_quiet_statistics(episode_loads.CLAIM_START_SQL, params)

    assert "episode_due" not in plan, plan
    # The wake's test of the run's episodes is made once, not once per column it sets.
    assert plan.count("(runs_run.lease_epoch + 1)") == 1, plan

    start = episode_loads.claim_and_start(run.pk, owner="test")
    assert start.started.episode.kind == EpisodeKind.FOLLOWUP and start.run.status == "active"


@pytest.mark.django_db
@pytest.mark.parametrize("unflushed", [True, False])
def test_the_start_statement_commits_unflushed_only_when_asked(unflushed):
    run = loop_helpers.make_run()
    loop_helpers.add_episode(run, EpisodeKind.START)
    params = {**leases.claim_params(run.pk, owner="test"), **episode_loads._params(unflushed=unflushed),
              "max_attempts": settings.LUCIA_EPISODE_MAX_ATTEMPTS}

    statements.fetch_dicts(episode_loads.CLAIM_START_SQL, params)  # in the test's transaction: the setting stays

    assert synchronous_commit() == ("off" if unflushed else "on")


def _starts(sql: str) -> bool:
    return sql in (episode_loads.CLAIM_START_SQL, episode_loads.HOLD_START_SQL)


@pytest.mark.django_db(transaction=True)
def test_a_start_in_its_own_transaction_asks_for_an_unflushed_commit_and_one_in_a_caller_s_does_not():
    own, callers = loop_helpers.make_run(), loop_helpers.make_run()
    for run in (own, callers):
        loop_helpers.add_episode(run, EpisodeKind.START)

    def start_both():
        assert episode_loads.claim_and_start(own.pk, owner="own").started.episode is not None
        with transaction.atomic():
            assert episode_loads.claim_and_start(callers.pk, owner="caller").started.episode is not None
            assert synchronous_commit() == "on"  # the caller's transaction commits as it chose

    asked = [params["unflushed"] for _, params in statements_run(start_both, picked=_starts)]
    assert asked == [True, False]
    assert synchronous_commit() == "on"  # the own transaction's setting ended with it


@pytest.mark.django_db(transaction=True)
def test_a_hold_s_start_waits_for_the_disk_its_lease_keeps_the_epoch_and_owner():
    run = loop_helpers.make_run()
    loop_helpers.add_episode(run, EpisodeKind.START)
    loop_helpers.add_episode(run, EpisodeKind.EVENT, {"note": "due too"})

    def drain():
        assert worker.advance_run(run.pk, owner="drains-two", heartbeat_interval=3600) is True

    asked = [("claim" if sql == episode_loads.CLAIM_START_SQL else "hold", params["unflushed"])
             for sql, params in statements_run(drain, picked=_starts)]

    assert asked[:2] == [("claim", True), ("hold", False)]
