"""Timers: enqueue runs with due episodes, and reap episodes whose worker died.

Both run every minute from the `runs.tasks.dispatch_due` schedule. Due times
and lease checks use the database clock, like the leases themselves;
`statement_timestamp()` rather than `now()`, which stands still for the whole
of an enclosing transaction. Simulated runs are skipped: the simulator drives
them on their virtual clock.
"""

import logging
import os
import socket

from django.db import connection

from runs import execution, leases, queue
from runs.models import Episode, EpisodeStatus

logger = logging.getLogger(__name__)

# Walks the partial index episode_due (status='queued', by due_at): the cost follows
# the number of due episodes, not the number of sleeping runs.
DUE_RUNS_SQL = """
SELECT e.run_id
  FROM runs_episode e
  JOIN runs_run r ON r.id = e.run_id
 WHERE e.status = 'queued' AND e.due_at <= statement_timestamp()
   AND NOT r.sim AND r.status IN ('active', 'waiting', 'waiting_human')
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
 GROUP BY e.run_id
 ORDER BY min(e.due_at)
 LIMIT %s
"""

# Uses the partial index episode_running (status='running').
ORPHANED_RUNS_SQL = """
SELECT DISTINCT e.run_id
  FROM runs_episode e
  JOIN runs_run r ON r.id = e.run_id
 WHERE e.status = 'running' AND NOT r.sim
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
 LIMIT %s
"""


def dispatch_due(*, limit: int = 500) -> int:
    """Enqueue advance_run for real runs with a due episode and no live lease; returns how many."""
    return queue.enqueue_run_ids(_run_ids(DUE_RUNS_SQL, limit))


def reap_expired(*, limit: int = 100) -> int:
    """Requeue episodes left running under an expired lease (or fail them past the attempt limit).

    The reaper claims the run's lease first, so it is fenced like any worker and
    a zombie holding the old epoch can no longer write. Returns episodes reaped.
    """
    owner = f"reaper:{socket.gethostname()}:{os.getpid()}"
    reaped = 0
    for run_id in _run_ids(ORPHANED_RUNS_SQL, limit):
        epoch = leases.claim(run_id, owner=owner)
        if epoch is None:
            continue  # a worker took it meanwhile; it resumes the episode itself
        try:
            reaped += _reap_run(run_id, epoch=epoch)
        except leases.LeaseLost:
            logger.warning("run %s: reaper lost the lease", run_id)
        finally:
            leases.release(run_id, epoch=epoch)
    return reaped


def _reap_run(run_id: int, *, epoch: int) -> int:
    with leases.fence(run_id, epoch=epoch) as run:
        episodes = list(Episode.objects.filter(run_id=run_id, status=EpisodeStatus.RUNNING).order_by("seq"))
        requeued = False
        for episode in episodes:
            error = episode.error or f"lease of epoch {episode.lease_epoch} expired while running"
            requeued |= execution.retry_or_give_up(run, episode, error=error, backoff=False)
            logger.warning("run %s: reaped episode #%s (attempt %s)", run_id, episode.seq, episode.attempts)
        if requeued:
            queue.enqueue_advance(run)
    return len(episodes)


def _run_ids(sql: str, limit: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]

