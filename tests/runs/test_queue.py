"""At most one waiting advance task per run, and none of an event's work lost to a task starting meanwhile."""

import pytest

from runs import queue, worker
from runs.models import Episode, EpisodeStatus, Run
from tests.factories import EpisodeFactory, RunFactory
from tests.runs import fakes, lock_waits


@pytest.mark.django_db(transaction=True)
def test_an_event_behind_a_waiting_task_is_drained_by_that_task_even_as_it_starts(monkeypatch):
    run = RunFactory()
    assert queue.enqueue_advance(run)  # a task is waiting in the queue
    loop, _ = fakes.install(monkeypatch)
    enqueued = []

    def event():
        # An inbound message: its episode and its enqueue commit together; the waiting task will drain it.
        EpisodeFactory(run=run, dedupe_key="inbound:1")
        enqueued.append(queue.enqueue_advance(Run.objects.get(pk=run.pk)))

    # The waiting task starts while the event is uncommitted.
    errors, blocked = lock_waits.behind_a_writer(event, lambda: worker.advance_run(run.pk))

    assert errors == []
    assert enqueued == [False]  # no second task behind the waiting one
    assert blocked, "the starting task did not wait for the event's transaction"
    assert len(loop.calls) == 1  # the task ran the event's episode
    assert Episode.objects.get(run=run).status == EpisodeStatus.DONE
    assert fakes.queued_run_ids() == [run.pk]  # only the task that was waiting
