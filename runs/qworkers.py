"""django-q2 workers (and the monitor) that wait without holding their queue's lock.

django-q2's worker blocks in `multiprocessing.Queue.get()`, which holds the
queue's reader lock (a process-shared semaphore) for as long as it waits. An
idle worker killed there (SIGKILL, OOM killer) never releases it: the sentinel
respawns the worker, the pusher keeps feeding the pipe, and no worker can ever
read again (django-q2 issue #23; the cluster looks alive and runs nothing).

Here an idle worker waits with `select()` on the pipe, which takes no lock and
consumes nothing, and takes the lock only for a non-blocking read of a task that
is already there: the window in which a kill can strand the lock shrinks from
"all idle time" to the microseconds of one read. The `runworkers` supervisor
still restarts a cluster that stops making progress, whatever the cause.

The monitor, the only reader of the result queue, waits the same way: a monitor
killed idle would otherwise leave every result unread and every task
unacknowledged (redelivered after Q_CLUSTER["retry"]), while the workers still
look busy.

`install()` swaps the functions django-q2's Sentinel spawns
(`django_q.cluster.worker` and `.monitor`); the loops themselves stay django-q2's own.
"""

import queue
import threading

# How long an idle worker waits on the pipe before looking again (it wakes at once when a task arrives).
IDLE_WAIT_SECONDS = 1.0
# Another worker took the task or holds the lock for its read: step back briefly.
CONTENDED_PAUSE_SECONDS = 0.01


def install() -> None:
    import django_q.cluster

    # Sentinel.spawn_worker, spawn_monitor and spawn_process look the functions up in that module's globals.
    django_q.cluster.worker = lock_free_worker
    django_q.cluster.monitor = lock_free_monitor


def lock_free_worker(task_queue, result_queue, timer, timeout=None) -> None:
    from django_q.worker import worker

    worker(PatientReader(task_queue), result_queue, timer, timeout)


def lock_free_monitor(result_queue, broker=None) -> None:
    from django_q.monitor import monitor

    monitor(PatientReader(result_queue), broker)


class PatientReader:
    """The one method django-q2's worker calls on its task queue, `get()`, minus the long lock hold."""

    def __init__(self, task_queue) -> None:
        self._queue = task_queue
        self._pause = threading.Event()  # never set: a sleep that reads as one

    def get(self):
        while True:
            # Connection.poll is select(): no lock, nothing consumed.
            if not self._queue._reader.poll(IDLE_WAIT_SECONDS):
                continue
            try:
                return self._queue.get(block=False)  # takes the reader lock only for a ready message
            except queue.Empty:
                self._pause.wait(CONTENDED_PAUSE_SECONDS)
