"""The episode's closing statements (runs.execution's close and finish, the postponement's closing write of
runs.model_outages) and runs.events' reads of a run's queued episodes find them by run or by id: planned with
statistics from a quiet hour while other runs' episodes are due or running (a 09:00 burst), none reads every run's
due or running episodes off the partial indexes episode_due / episode_running."""

from __future__ import annotations

import pytest
from django.db import connection

from runs import events, execution, leases, model_outages
from runs.llm.base import ModelError
from runs.models import Episode, EpisodeKind, EpisodeStatus
from tests.runs import loop_helpers
from tests.runs.plan_helpers import plan_with_quiet_statistics

pytestmark = pytest.mark.django_db


class _Captured(Exception):  # noqa: N818 (not an error: the statement a call was about to send)
    pass


def _statement_of(call) -> tuple[str, dict]:
    """The statement `call` sends first, not sent."""
    def capture(execute, sql, params, many, context):
        raise _Captured(sql, params)

    with connection.execute_wrapper(capture), pytest.raises(_Captured) as captured:
        call()
    return captured.value.args


def _running_episode():
    """A leased run with a history (episodes done) and its episode running."""
    run = loop_helpers.make_run()
    for _ in range(40):
        Episode.objects.filter(pk=loop_helpers.add_episode(run, EpisodeKind.EVENT).pk).update(
            status=EpisodeStatus.DONE)
    epoch = leases.claim(run.pk, owner="test")
    episode = loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)
    Episode.objects.filter(pk=episode.pk).update(status=EpisodeStatus.RUNNING, lease_epoch=epoch)
    episode.refresh_from_db()
    return run, epoch, episode


def test_the_finish_writes_the_episode_found_by_its_key():
    run, epoch, episode = _running_episode()
    rider = execution._finish(run.virtual_now, episode)

    plan = plan_with_quiet_statistics(*_statement_of(lambda: leases.write(run.pk, epoch=epoch, rider=rider)))

    assert "episode_running" not in plan and "runs_episode_pkey" in plan, plan
    leases.write(run.pk, epoch=epoch, rider=rider)
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.DONE


def test_the_closing_write_tests_what_is_due_once():
    run, epoch, _ = _running_episode()
    with leases.fence(run.pk, epoch=epoch) as locked:
        sql, params = _statement_of(lambda: execution._close(
            locked, fields=[], decision=execution.decisions.Decision(), epoch=epoch))

    plan = plan_with_quiet_statistics(sql, params)

    # The running episodes' test, once for both lease columns.
    assert plan.count("lease_epoch < ") == 1, plan


@pytest.mark.parametrize("released", [True, False])
def test_the_postponement_finds_the_run_s_episodes_by_run_and_the_episode_by_its_key(released):
    run, epoch, episode = _running_episode()
    if not released:
        loop_helpers.add_episode(run, EpisodeKind.INBOUND)  # due now: the lease is kept
    postponed = model_outages.postponement(run, episode, error=ModelError("429 rate limited", retryable=True),
                                           contact_tz="UTC")
    rider = postponed.closing(run, now=run.virtual_now)

    plan = plan_with_quiet_statistics(*_statement_of(lambda: leases.write(run.pk, epoch=epoch, rider=rider)))

    assert "episode_due" not in plan and "episode_running" not in plan, plan
    written = leases.write(run.pk, epoch=epoch, rider=rider)
    assert (written.lease_owner is None) is released
    assert written.next_wake_at == (postponed.retry_at if released else run.virtual_now)
    assert Episode.objects.get(pk=episode.pk).status == EpisodeStatus.QUEUED


def test_the_closing_write_finds_the_run_s_queued_episodes_by_run():
    run = loop_helpers.make_run()
    params = {"run": run.pk, "wall": run.virtual_now, "open": True, "now": run.virtual_now, "epoch": 1,
              "unflushed": True, "set_state": False, "state": None, "set_status": False, "status": None,
              "set_wake_when": False, "wake_when": None, **events.closing_params([events.Planned(
                  kind=EpisodeKind.FOLLOWUP, due_at=run.virtual_now, dedupe_key="f", payload={},
                  unless_queued_by=run.virtual_now)], cancel_followups=True)}

    plan = plan_with_quiet_statistics(execution.CLOSE_SQL, params)

    assert "episode_due" not in plan, plan


def test_the_earliest_due_finds_the_run_s_queued_episodes_by_run():
    run = loop_helpers.make_run()
    queued = loop_helpers.add_episode(run, EpisodeKind.FOLLOWUP)

    plan = plan_with_quiet_statistics(*_statement_of(lambda: events.earliest_due(run.pk)))

    assert "episode_due" not in plan, plan
    assert events.earliest_due(run.pk) == queued.due_at
