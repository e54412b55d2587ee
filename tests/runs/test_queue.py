"""At most one waiting advance task per run, and none of an event's work lost to a task starting meanwhile."""

import threading

import pytest
from django.db import connection, transaction

from runs import queue, worker
from runs.models import Episode, EpisodeStatus, Run
from tests.factories import EpisodeFactory, RunFactory
from tests.runs import fakes, lock_waits


@pytest.mark.django_db(transaction=True)
def test_an_event_behind_a_waiting_task_is_drained_by_that_task_even_as_it_starts(monkeypatch):
    run = RunFactory()
    assert queue.enqueue_advance(run)  # a task is waiting in the queue
    loop, _ = fakes.install(monkeypatch)
    marked, commit = threading.Event(), threading.Event()
    errors, enqueued = [], []

    def event():
        # An inbound message: its episode and its enqueue commit together; the waiting task will drain it.
        try:
            with transaction.atomic():
                EpisodeFactory(run=run, dedupe_key="inbound:1")
                enqueued.append(queue.enqueue_advance(Run.objects.get(pk=run.pk)))
                marked.set()
                assert commit.wait(30)
        except Exception as exc:
            errors.append(exc)
        finally:
            marked.set()
            connection.close()

    def task():
        try:
            worker.advance_run(run.pk)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    event_thread = threading.Thread(target=event)
    event_thread.start()
    assert marked.wait(30)
    task_thread = threading.Thread(target=task)  # the waiting task starts while the event is uncommitted
    task_thread.start()
    blocked = lock_waits.wait_for_a_lock_wait()
    commit.set()
    event_thread.join(30)
    task_thread.join(30)

    assert errors == []
    assert enqueued == [False]  # no second task behind the waiting one
    assert blocked, "the starting task did not wait for the event's transaction"
    assert len(loop.calls) == 1  # the task ran the event's episode
    assert Episode.objects.get(run=run).status == EpisodeStatus.DONE
    assert fakes.queued_run_ids() == [run.pk]  # only the task that was waiting
