"""Hand a run to the worker cluster (django-q2, ORM broker on the same database).

`async_task` inserts a queue row through the ORM on the default connection, so
an enqueue made inside the caller's transaction commits or rolls back with it:
a rolled-back start or event leaves no task behind.
"""

from collections.abc import Iterable

from django_q.tasks import async_task

from runs.models import Run

ADVANCE_TASK = "runs.tasks.advance_run"


def enqueue_advance(run: Run) -> None:
    """Ask a worker to advance the run. Simulated runs are driven by the simulator, never queued."""
    if run.sim:
        return
    _enqueue(run.pk)


def enqueue_run_ids(run_ids: Iterable[int]) -> int:
    """Enqueue already-filtered real runs (dispatch); returns how many were enqueued."""
    count = 0
    for run_id in run_ids:
        _enqueue(run_id)
        count += 1
    return count


def _enqueue(run_id: int) -> None:
    async_task(ADVANCE_TASK, run_id, task_name=f"advance-run-{run_id}", group="advance_run")
