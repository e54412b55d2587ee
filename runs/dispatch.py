"""Timers: enqueue runs with due episodes, and reap episodes whose worker died.

Escalation notices ride on the dispatch pass (runs.notifications).

Both run from the `runs.tasks.dispatch_due` schedule (every minute) and from
the worker supervisor's tick (every few seconds), possibly in several
processes at once. Each is a loop of short claims, healthchecks' `sendalerts`
style: claim a batch by a conditional UPDATE, act on each item, repeat until
nothing is left or the slice's time budget is spent; one item's failure is
logged and skipped, never blocking the others.

Due times and lease checks use the database clock, like the leases
themselves; `statement_timestamp()` rather than `now()`, which stands still
for the whole of an enclosing transaction. Simulated runs are skipped: the
simulator drives them on their virtual clock. Ended runs are never queued.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time

from django.db import connection, transaction

from runs import clock, execution, leases, notifications, queue
from runs.models import Episode, EpisodeStatus

logger = logging.getLogger(__name__)

BATCH = 500
REAP_BATCH = 100

# Candidates: walks the partial index episode_due (status='queued', by due_at), so the cost follows the
# number of due episodes, not the number of sleeping runs. Each due episode's run is looked up by its key (the
# LATERAL's LIMIT keeps the planner from flattening it into a join, which it would run as a hash join over every
# open run whenever its estimate of due episodes is high: 1,000,000 sleeping runs read for 50 due; the queue mark
# is checked outside it, so its look at django-q2's queue is costed once, not per episode). Runs with a
# live lease (being advanced) or a task already waiting (advance_enqueued_at) are left out, so a backed-up queue
# is not fed the same runs again. The first `limit` eligible due episodes in due order, then their runs (a run with
# several due episodes makes a batch shorter; dispatch_due goes on until a batch is empty): ordered and limited,
# the walk of episode_due stops early, which the planner prefers whatever it estimates. Grouped first, the query
# had to read every due episode, and the planner, multiplying the odds of 'queued' by those of 'due by now' (done
# episodes all lie in the past), expected thousands where a few were due and read all of runs_episode instead
# (manage.py bench after a 09:00 burst: 8.6 ms for 50; tests/runs/test_dispatch.py).
# Params: queue.mark_params(), skip (run ids already claimed or failed in this pass), limit.
DUE_RUNS_SQL = f"""
SELECT picked.run_id, min(picked.due_at) AS first_due, picked.seen_mark
  FROM (SELECT e.run_id, e.due_at, r.advance_enqueued_at AS seen_mark
          FROM runs_episode e
         CROSS JOIN LATERAL (
               SELECT r.advance_enqueued_at FROM runs_run r
                WHERE r.id = e.run_id
                  AND NOT r.sim AND r.status IN ('active', 'waiting', 'waiting_human')
                  AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
                LIMIT 1) r
         WHERE e.status = 'queued' AND e.due_at <= statement_timestamp()
           AND NOT {queue.WAITING_MARK_SQL}
           AND NOT (e.run_id = ANY(%(skip)s))
         ORDER BY e.due_at
         LIMIT %(limit)s) picked
 GROUP BY picked.run_id, picked.seen_mark
 ORDER BY min(picked.due_at)
"""  # noqa: S608 (composed of constants; every value is a parameter)

# Marks the candidates, re-checked under the row lock (another dispatcher may have marked them since the
# snapshot). The re-check sees the run row as committed since, but the queue sub-select still reads the old
# snapshot, where the other dispatcher's queue row does not exist yet: its fresh mark would look unbacked. So a
# mark that changed since the snapshot (`seen_mark`) drops the run from this pass. SKIP LOCKED: a row locked
# elsewhere is being marked by another dispatcher, enqueued by an event, or fenced by its worker; none of them
# needs this pass. Rows locked in id order: no deadlock between passes.
CLAIM_DUE_SQL = f"""
WITH due AS ({DUE_RUNS_SQL}),
locked AS (
    SELECT r.id FROM runs_run r JOIN due ON due.run_id = r.id
     WHERE r.status IN ('active', 'waiting', 'waiting_human')
       AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
       AND NOT {queue.WAITING_MARK_SQL}
       AND r.advance_enqueued_at IS NOT DISTINCT FROM due.seen_mark
     ORDER BY r.id
       FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE runs_run r SET advance_enqueued_at = %(now)s
  FROM locked JOIN due ON due.run_id = locked.id
 WHERE r.id = locked.id
RETURNING r.id, due.first_due
"""  # noqa: S608 (composed of constants; every value is a parameter)

# Uses the partial index episode_running (status='running').
ORPHANED_RUNS_SQL = """
SELECT DISTINCT e.run_id
  FROM runs_episode e
  JOIN runs_run r ON r.id = e.run_id
 WHERE e.status = 'running' AND NOT r.sim
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
   AND NOT (e.run_id = ANY(%s))
 LIMIT %s
"""


def dispatch_due(*, batch: int = BATCH, budget_s: float | None = None) -> int:
    """Enqueue advance_run for every real open run with a due episode, no live lease and no task waiting.

    Loops until none is left or the budget (a share of django-q2's timeout) is spent. Returns how many were
    enqueued.
    """
    budget = queue.slice_seconds() if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    enqueued, seen = 0, []
    _notify_escalations(budget_s=budget / 4)
    while True:
        # A run claimed (or failed) once in this pass is not taken again in it, whatever its mark says.
        claimed, failures = _claim_and_enqueue(batch=batch, skip=seen)
        enqueued += len(claimed) - len(failures)
        seen += claimed
        # Rows skipped as locked shorten a batch too: only an empty one means nothing is left.
        if not claimed or time.monotonic() >= deadline:
            return enqueued


def _notify_escalations(*, budget_s: float) -> None:
    """Escalation notices (runs.notifications) ride on this pass; a failure there never holds back the timers."""
    try:
        notifications.notify_due(budget_s=budget_s)
    except Exception:
        logger.exception("escalation notice pass failed; dispatching anyway")


def reap_expired(*, batch: int = REAP_BATCH, budget_s: float | None = None) -> int:
    """Requeue episodes left running under an expired lease (or fail them past the attempt limit).

    The reaper claims the run's lease first, so it is fenced like any worker and
    a zombie holding the old epoch can no longer write. A run that fails to be
    reaped is logged and skipped for the rest of the pass. Returns episodes reaped.
    """
    deadline = time.monotonic() + (queue.slice_seconds() if budget_s is None else budget_s)
    owner = f"reaper:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"  # a token: see worker.default_owner
    reaped, seen = 0, []
    while time.monotonic() < deadline:
        run_ids = _run_ids(ORPHANED_RUNS_SQL, [seen, batch])
        if not run_ids:
            break
        seen += run_ids
        for run_id in run_ids:
            try:
                reaped += _reap(run_id, owner=owner)
            except Exception:
                logger.exception("run %s: reaping failed; the next pass tries again", run_id)
    return reaped


def _claim_and_enqueue(*, batch: int, skip: list[int]) -> tuple[list[int], list[int]]:
    """(run ids claimed by this batch, longest-waiting first; those whose enqueue failed)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CLAIM_DUE_SQL, {**queue.mark_params(), "skip": skip, "limit": batch})
        claimed = [run_id for run_id, _ in sorted(cursor.fetchall(), key=lambda row: (row[1], row[0]))]
        failed = queue.enqueue_marked(claimed)
    return claimed, failed


def _reap(run_id: int, *, owner: str) -> int:
    epoch = leases.claim(run_id, owner=owner)
    if epoch is None:
        return 0  # a worker took it meanwhile; it resumes the episode itself
    try:
        return _reap_run(run_id, epoch=epoch, owner=owner)
    except leases.LeaseLost:
        logger.warning("run %s: reaper lost the lease", run_id)
        return 0
    finally:
        leases.release(run_id, epoch=epoch, owner=owner)


def _reap_run(run_id: int, *, epoch: int, owner: str) -> int:
    with leases.fence(run_id, epoch=epoch, owner=owner) as run:
        episodes = list(Episode.objects.filter(run_id=run_id, status=EpisodeStatus.RUNNING).order_by("seq"))
        if not run.is_open:
            # Cancelled or ended while a worker ran it: the episode ends with the run, nothing is queued.
            for episode in episodes:
                _fail_with_run(run, episode)
            return len(episodes)
        requeued = False
        for episode in episodes:
            error = episode.error or f"lease of epoch {episode.lease_epoch} expired while running"
            requeued |= execution.retry_or_give_up(run, episode, error=error, backoff=False)
            logger.warning("run %s: reaped episode #%s (attempt %s)", run_id, episode.seq, episode.attempts)
        if requeued:
            queue.enqueue_advance(run)
    return len(episodes)


def _fail_with_run(run, episode: Episode) -> None:
    episode.fail()
    episode.error = f"run {run.status} while the episode ran"
    episode.finished_at = clock.now(run)
    episode.save(update_fields=["status", "error", "finished_at"])


def _run_ids(sql: str, params: list) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]
