"""A quiet close (the run moves along: open, no human waited on) commits without waiting for its WAL to reach the
disk (runs.execution.CLOSE_SQL says why that loses nothing a crash would not), and only in the fence's own
transaction; a close that leaves the run waiting for a human commits as it always did."""

from __future__ import annotations

import pytest
from django.db import connection

from runs import escalations, execution, worker
from runs.models import EpisodeKind, EpisodeStatus, EscalationKind, Run, RunStatus
from tests.commit_settings import synchronous_commit
from tests.runs import loop_helpers


def _advance_seeing_the_close_s_setting(run: Run) -> list[str]:
    """Advance `run`; what synchronous_commit was right after the closing statement, inside its transaction."""
    seen = []

    def after_close(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql == execution.CLOSE_SQL:
            seen.append(synchronous_commit())
        return result

    with connection.execute_wrapper(after_close):
        assert worker.advance_run(run.pk, owner="closing", heartbeat_interval=3600) is True
    return seen


@pytest.mark.django_db(transaction=True)
def test_a_quiet_close_in_the_fence_s_own_transaction_commits_without_waiting_for_the_disk():
    run = loop_helpers.make_run()
    episode = loop_helpers.add_episode(run, EpisodeKind.START)
    before = synchronous_commit()

    assert _advance_seeing_the_close_s_setting(run) == ["off"]

    assert synchronous_commit() == before == "on"  # for that transaction only
    episode.refresh_from_db()
    run.refresh_from_db()
    assert episode.status == EpisodeStatus.DONE and run.status == RunStatus.WAITING


@pytest.mark.django_db(transaction=True)
def test_a_close_that_leaves_the_run_waiting_for_a_human_waits_for_the_disk():
    run = loop_helpers.make_run()
    escalations.open_escalation(run, kind=EscalationKind.QUESTION, prompt="Which address should we use?")
    loop_helpers.add_episode(run, EpisodeKind.START)

    assert _advance_seeing_the_close_s_setting(run) == ["on"]

    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_HUMAN


@pytest.mark.django_db
def test_a_quiet_close_inside_a_caller_s_transaction_leaves_its_commit_as_the_caller_chose():
    run = loop_helpers.make_run()
    loop_helpers.add_episode(run, EpisodeKind.START)

    # The caller's transaction: the test's own (pytest-django's), around the fence's.
    assert _advance_seeing_the_close_s_setting(run) == ["on"]
    assert synchronous_commit() == "on"
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
