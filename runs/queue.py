"""Hand a run to the worker cluster (django-q2, ORM broker on the same database).

`async_task` inserts a queue row through the ORM on the default connection, so
an enqueue made inside the caller's transaction commits or rolls back with it:
a rolled-back start or event leaves no task behind.

At most one advance task waits per run: `Run.advance_enqueued_at` is set by a
conditional UPDATE in the transaction that inserts the queue row and cleared
when a task starts. An enqueue that finds it set adds nothing: the waiting
task will drain whatever the caller made due (the UPDATE locks the run row,
so a task starting meanwhile waits for the caller's commit and then sees its
episode). A mark stops counting once no task can be behind it: when it is
older than django-q2's `retry`, or when the queue holds no row enqueued since
it was set (WAITING_MARK_SQL) — a task that failed before it could clear the
mark (the database went away under it) is then replaced at the next dispatch,
not minutes later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.tasks import async_task

from runs.models import Run

logger = logging.getLogger(__name__)

ADVANCE_TASK = "runs.tasks.advance_run"
# A work slice (one dispatch pass, one advance_run drain) stops starting new work after this share of
# django-q2's task timeout, so it ends well before the cluster kills it.
SLICE_SHARE_OF_TIMEOUT = 1 / 3

# Marks are stamped with the app server's clock, as django-q2 stamps its queue rows (a row is stamped after
# its mark, in the same transaction); this allows for app servers' clocks differing among themselves.
CLOCK_SKEW_SECONDS = 5

# True while run `r` has a task waiting: its mark is younger than `retry` and the queue holds a row that can
# be behind it. The ORM broker stores a waiting row with lock = its enqueue time and a taken one with lock = the
# time it was taken + retry, so a row behind the mark has lock >= mark (less the clock skew). Mark and row
# commit together, so one snapshot sees both or neither. Params: stale_secs, backed_secs (mark_params()).
WAITING_MARK_SQL = """(r.advance_enqueued_at IS NOT NULL
      AND r.advance_enqueued_at >= statement_timestamp() - make_interval(secs => %(stale_secs)s)
      AND r.advance_enqueued_at <= coalesce((SELECT max(q."lock") FROM django_q_ormq q), '-infinity'::timestamptz)
                                   + make_interval(secs => %(backed_secs)s))"""

# Locks the run row whatever its mark (a task starting meanwhile waits for this transaction), keeps a
# waiting mark as it is, and says whether a task must be queued.
MARK_ONE_SQL = f"""
UPDATE runs_run target
   SET advance_enqueued_at = CASE WHEN old.stale THEN %(now)s ELSE old.advance_enqueued_at END
  FROM (SELECT r.id, r.advance_enqueued_at, NOT {WAITING_MARK_SQL} AS stale
          FROM runs_run r WHERE r.id = %(run_id)s FOR NO KEY UPDATE) old
 WHERE target.id = old.id
RETURNING old.stale
"""  # noqa: S608 (composed of constants; every value is a parameter)


def enqueue_advance(run: Run) -> bool:
    """Ask a worker to advance the run, unless a task for it is already waiting. Simulated runs are driven
    by the simulator, never queued. Returns whether a task was queued."""
    if run.sim:
        return False
    # No savepoint inside a caller's transaction: mark and queue row commit with it, or neither does.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(MARK_ONE_SQL, {**mark_params(), "run_id": run.pk})
        row = cursor.fetchone()
        if not row or not row[0]:
            return False
        _enqueue(run.pk)
    return True


def enqueue_marked(run_ids: Sequence[int]) -> list[int]:
    """Queue a task for runs the caller just marked (runs.dispatch, same transaction); returns the ids that
    failed. One failing insert never stops the others: each runs in its own savepoint, and a failed run's
    mark is cleared so the next pass tries it again."""
    failed = []
    for run_id in run_ids:
        try:
            with transaction.atomic():
                _enqueue(run_id)
        except Exception:
            logger.exception("run %s: could not enqueue advance_run", run_id)
            failed.append(run_id)
    if failed:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE runs_run SET advance_enqueued_at = NULL WHERE id = ANY(%s)", [failed])
    return failed


def mark_started(run_id: int) -> None:
    """A task for the run has started: later enqueues queue a new one (it would drain what they add)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET advance_enqueued_at = NULL WHERE id = %s AND advance_enqueued_at IS NOT NULL",
            [run_id],
        )


def mark_params() -> dict:
    """WAITING_MARK_SQL's parameters, and `now` to stamp a new mark with. A mark counts at most `retry` + a
    minute: django-q2 hands an unacknowledged task out again after `retry`."""
    retry = int(settings.Q_CLUSTER["retry"])
    return {"stale_secs": retry + 60, "backed_secs": CLOCK_SKEW_SECONDS, "now": timezone.now()}


def slice_seconds() -> float:
    return float(settings.Q_CLUSTER["timeout"]) * SLICE_SHARE_OF_TIMEOUT


def _enqueue(run_id: int) -> None:
    async_task(ADVANCE_TASK, run_id, task_name=f"advance-run-{run_id}", group="advance_run")
