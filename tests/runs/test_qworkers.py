"""The lock-free idle wait: a reader killed while idle leaves the task queue readable.

Real processes on django-q2's own Queue (the one its Sentinel hands the workers).
"""

import multiprocessing
import os
import queue
import signal

import pytest
from django_q.queues import Queue

from runs import qworkers
from tests.runs.cluster_helpers import blocked_in, wait_for

pytestmark = pytest.mark.slow

FORK = multiprocessing.get_context("fork")


def _blocking_reader(task_queue):
    task_queue.get()  # django-q2's worker: waits holding the queue's reader lock


def _patient_reader(task_queue):
    qworkers.PatientReader(task_queue).get()


def _kill_idle_reader(task_queue, target, *, waiting_in: tuple[str, ...]) -> None:
    reader = FORK.Process(target=target, args=(task_queue,))
    reader.start()
    assert wait_for(lambda: blocked_in(reader.pid, *waiting_in), seconds=10)
    os.kill(reader.pid, signal.SIGKILL)
    reader.join()


def test_a_killed_idle_reader_of_django_q2s_wait_leaves_the_queue_unreadable():
    task_queue = Queue()
    _kill_idle_reader(task_queue, _blocking_reader, waiting_in=("pipe_read",))  # with the lock held
    task_queue.put("task")
    with pytest.raises(queue.Empty):
        task_queue.get(timeout=2)  # the dead reader still holds the lock: the upstream wedge


def test_a_killed_idle_patient_reader_leaves_the_queue_readable():
    task_queue = Queue()
    _kill_idle_reader(task_queue, _patient_reader, waiting_in=("poll", "select"))
    task_queue.put("task")
    assert qworkers.PatientReader(task_queue).get() == "task"
    assert task_queue.qsize() == 0


def test_installed_the_sentinel_spawns_lock_free_workers():
    import django_q.cluster

    qworkers.install()
    assert django_q.cluster.worker is qworkers.lock_free_worker
    assert django_q.cluster.monitor is qworkers.lock_free_monitor
