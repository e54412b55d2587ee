"""The episode hot path counts round trips (DESIGN §10): start, follow-up and inbound episodes each stay within
a fixed number of queries, so a change that adds one per episode shows here rather than in `make bench`."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from connectors import identities
from runs import compliance, events, worker
from runs.llm.base import ModelError
from runs.models import Episode, EpisodeKind, EpisodeStatus, OutboxMessage, Run, Task, TaskStatus
from tests.factories import OrganizationFactory
from tests.runs import loop_helpers, send_helpers

# Per kind: what each takes now, a start one more for the plan's read when the process has not cached it yet
# (runs.plan_cache). The inbound episode here also records a promise in the contact's memory (two statements).
MAX_QUERIES = {EpisodeKind.START: 8, EpisodeKind.FOLLOWUP: 7, EpisodeKind.INBOUND: 9}
# A real run whose plan caps the messages per contact: the statement that writes its send's row also takes the
# address's lock and counts the caps again (runs.compliance.recount), so it takes no statement more than a start.
MAX_REAL_START_WITH_CAPS = MAX_QUERIES[EpisodeKind.START]


def _advance(run: Run) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert worker.advance_run(run.pk, owner="count", heartbeat_interval=3600) is True
    # Savepoints stand for the BEGIN/COMMIT a worker outside a test sends with each transaction: not counted.
    statements = [query["sql"] for query in queries.captured_queries if "SAVEPOINT" not in query["sql"]]
    if os.environ.get("LUCIA_SHOW_QUERIES"):
        print(f"\n--- {len(statements)} queries")
        for sql in statements:
            print("   ", " ".join(sql.split())[:300])
    return statements


def _move_clock_to_next_due(run: Run) -> Episode:
    due = Episode.objects.filter(run=run, status=EpisodeStatus.QUEUED).order_by("due_at").first()
    Run.objects.filter(pk=run.pk).update(virtual_now=due.due_at + timedelta(seconds=1))
    return due


@pytest.fixture
def started_run(db) -> Run:
    run = loop_helpers.make_run()
    loop_helpers.add_episode(run, EpisodeKind.START)
    return run


@pytest.mark.django_db
def test_a_start_episode_sends_within_the_query_budget(started_run):
    statements = _advance(started_run)
    assert OutboxMessage.objects.filter(run=started_run, status="sent").count() == 1
    assert len(statements) <= MAX_QUERIES[EpisodeKind.START], "\n".join(statements)


@pytest.fixture
def real_run_with_caps(db) -> Run:
    plan = send_helpers.open_plan()
    assert compliance.has_caps(plan)
    # A real run in a simulation organization: the only kind that may hold a sandbox identity.
    run = send_helpers.real_run(plan, organization=OrganizationFactory(slug="queries-sim"))
    identities.create_identity(run.organization, channel="email", address="ap@acme.test", sandbox=True)
    loop_helpers.add_episode(run, EpisodeKind.START)
    return run


@pytest.mark.django_db
def test_a_real_start_episode_with_caps_sends_within_the_query_budget(real_run_with_caps, settings):
    settings.LUCIA_LLM = "scripted"
    statements = _advance(real_run_with_caps)
    assert OutboxMessage.objects.filter(run=real_run_with_caps, status="sent").count() == 1
    assert len(statements) <= MAX_REAL_START_WITH_CAPS, "\n".join(statements)


@pytest.mark.django_db
def test_a_followup_episode_sends_within_the_query_budget(started_run):
    _advance(started_run)
    followup = _move_clock_to_next_due(started_run)
    assert followup.kind == EpisodeKind.FOLLOWUP
    statements = _advance(started_run)
    assert Episode.objects.get(pk=followup.pk).status == EpisodeStatus.DONE
    assert OutboxMessage.objects.filter(run=started_run, status="sent").count() == 2
    assert len(statements) <= MAX_QUERIES[EpisodeKind.FOLLOWUP], "\n".join(statements)


@pytest.mark.django_db
def test_an_inbound_episode_within_the_query_budget(started_run):
    _advance(started_run)
    run = Run.objects.get(pk=started_run.pk)
    reply = events.record_event(run, kind=EpisodeKind.INBOUND, dedupe_key="reply-1",
                                payload={"channel": "email", "from": loop_helpers.VENDOR_EMAIL,
                                         "subject": "Re: W-9", "text": "Sure, I will send it by Friday."})
    statements = _advance(run)
    assert Episode.objects.get(pk=reply.pk).status == EpisodeStatus.DONE
    assert len(statements) <= MAX_QUERIES[EpisodeKind.INBOUND], "\n".join(statements)


@pytest.mark.django_db
def test_an_inbound_episode_that_settles_a_task_writes_it_with_a_fenced_write_it_makes_anyway(started_run):
    _advance(started_run)
    reply = loop_helpers.inbound(Run.objects.get(pk=started_run.pk), "Signed W-9 attached.", files=[loop_helpers.PDF])

    statements = _advance(started_run)

    assert Episode.objects.get(pk=reply.pk).status == EpisodeStatus.DONE
    assert Task.objects.get(run=started_run, key="collect_w9").status == TaskStatus.DONE
    # No statement (nor transaction) of its own: the task rides on a fenced write of the episode.
    assert not [sql for sql in statements if sql.lstrip().upper().startswith('UPDATE "RUNS_TASK"')]
    assert any("task_done_rider" in sql for sql in statements)


# A model outage: the start statement, then one autocommitted fenced statement that journals the postponement,
# requeues the episode, puts the run to sleep and releases the lease (runs.model_outages.Postponement.closing).
MAX_POSTPONEMENT = 2


@pytest.mark.django_db
def test_a_postponed_episode_within_the_query_budget(started_run, monkeypatch):
    class Down:
        name = "scripted"

        def complete(self, request):
            raise ModelError("503 service unavailable", retryable=True)

    _advance(started_run)  # the plan is cached, as for every later episode of the run
    _move_clock_to_next_due(started_run)
    loop_helpers.use_provider(monkeypatch, Down())
    statements = _advance(started_run)
    run = Run.objects.get(pk=started_run.pk)
    assert run.lease_owner is None and run.wake_when == "model:outage"
    assert Episode.objects.filter(run=run, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED).exists()
    assert len(statements) <= MAX_POSTPONEMENT, "\n".join(statements)
