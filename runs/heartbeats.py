"""Cluster heartbeats: workers stamp each task's start and end, on the database clock.

The only writer of `runs_clusterheartbeat`. A cluster whose processes are all
alive can still run nothing (a worker killed while it held django-q2's queue
lock, django-q2 issue #23); only progress tells. Stamps are upserts, so a bare
`qcluster` (no supervisor, no row yet) is recorded too.

A task's two stamps, each in its own transaction, commit without waiting for their WAL to reach the disk
(connectors.commits): every task of every worker of the cluster upserts the same row twice, and a commit that
waits holds the row's lock through its flush, so the workers queued behind one another's flushes. A stamp that a
database crash takes back (with every commit after it: the WAL's order) leaves the row as it was a moment before,
as a worker killed in a task leaves it (an in-flight count one too high, reset by the next registration). A
worker's ready stamp waits: lost, its cluster would look as if no worker had come up, and be restarted.
"""

import contextlib
import functools
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection

from connectors import commits

logger = logging.getLogger(__name__)

# A qcluster whose workers are not up this long after it started is restarted.
BOOT_TIMEOUT = timedelta(seconds=60)

_UPSERT = functools.partial("""
INSERT INTO runs_clusterheartbeat AS h
       (cluster, host, pid, started_at, ready_at, last_task_started_at, last_task_finished_at, in_flight,
        restarts, last_restart_reason)
SELECT %(cluster)s, %(host)s, NULL, statement_timestamp(), {ready}, {started}, {finished}, {in_flight}, 0, ''
  FROM {unflushed}
ON CONFLICT (cluster) DO UPDATE SET {update}
""".format, unflushed=commits.UNFLUSHED_FROM)
_STARTED_SQL = _UPSERT(
    ready="NULL", started="statement_timestamp()", finished="NULL", in_flight=1,
    update="last_task_started_at = statement_timestamp(), in_flight = h.in_flight + 1")
_FINISHED_SQL = _UPSERT(
    ready="NULL", started="NULL", finished="statement_timestamp()", in_flight=0,
    update="last_task_finished_at = statement_timestamp(), in_flight = greatest(h.in_flight - 1, 0)")
_READY_SQL = _UPSERT(
    ready="statement_timestamp()", started="NULL", finished="NULL", in_flight=0,
    update="ready_at = statement_timestamp()")


def cluster_name() -> str:
    """This process's cluster: the supervisor names it; a bare qcluster is its host and process group."""
    return settings.LUCIA_WORKER_CLUSTER or f"{socket.gethostname()}:{os.getpgrp()}"


@contextlib.contextmanager
def beat(cluster: str | None = None) -> Iterator[None]:
    """Stamp a task's start and end. A failed stamp never fails the task: progress is advisory."""
    cluster = cluster or cluster_name()
    _stamp(_STARTED_SQL, cluster, may_skip_flush=True)
    try:
        yield
    finally:
        _stamp(_FINISHED_SQL, cluster, may_skip_flush=True)


def _stamp(sql: str, cluster: str, *, may_skip_flush: bool) -> None:
    """Upsert the cluster's row; `may_skip_flush`: its commit need not wait for the disk (in its own transaction)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, {"cluster": cluster, "host": socket.gethostname(),
                                 "unflushed": may_skip_flush and commits.in_own_transaction(connection)})
    except DatabaseError as exc:
        logger.warning("cluster %s: heartbeat not recorded (%s)", cluster, exc.__class__.__name__)


def worker_ready(cluster: str | None = None) -> None:
    """A worker process of the cluster came up (sent by django-q2 as `post_spawn`)."""
    _stamp(_READY_SQL, cluster or cluster_name(), may_skip_flush=False)  # the module's docstring says why


def register(cluster: str, *, pid: int, running_for: float = 0.0) -> None:
    """A new qcluster process runs for the cluster, started `running_for` seconds ago.

    Resets the in-flight count. Ready stamps older than the new start no longer
    count, so a registration retried late (database down) still sees its workers.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runs_clusterheartbeat AS h (cluster, host, pid, started_at, in_flight, restarts,
                   last_restart_reason)
            VALUES (%s, %s, %s, statement_timestamp() - make_interval(secs => %s), 0, 0, '')
            ON CONFLICT (cluster) DO UPDATE
               SET host = EXCLUDED.host, pid = EXCLUDED.pid, started_at = EXCLUDED.started_at, in_flight = 0
            """,
            [cluster, socket.gethostname(), pid, running_for],
        )


def record_restart(cluster: str, *, reason: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_clusterheartbeat
               SET restarts = restarts + 1, last_restart_at = statement_timestamp(), last_restart_reason = %s
             WHERE cluster = %s
            """,
            [reason[:2000], cluster],
        )


@dataclass(frozen=True)
class Progress:
    """What a cluster did lately, measured at `now` (database clock)."""

    now: datetime
    started_at: datetime
    ready_at: datetime | None
    last_task_started_at: datetime | None
    last_task_finished_at: datetime | None
    in_flight: int
    waiting_tasks: int  # queue rows waiting (untaken, or taken and unacknowledged) longer than the stall time

    @property
    def booting(self) -> bool:
        return self.ready_at is None or self.ready_at < self.started_at

    @property
    def last_progress_at(self) -> datetime:
        stamps = (self.started_at, self.ready_at, self.last_task_started_at, self.last_task_finished_at)
        return max(t for t in stamps if t)


def progress(cluster: str, *, stall_after: timedelta) -> Progress | None:
    """The cluster's stamps and how much queued work has waited past `stall_after`; None: no row yet.

    A django-q2 ORM queue row's `lock` is its enqueue time until a cluster takes it,
    then the time it was taken plus Q_CLUSTER["retry"]; the row is deleted when the
    result is acknowledged.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT statement_timestamp(), h.started_at, h.ready_at, h.last_task_started_at, h.last_task_finished_at,
                   h.in_flight,
                   (SELECT count(*) FROM django_q_ormq q
                     WHERE q.key = %s
                       AND coalesce(CASE WHEN q.lock > statement_timestamp()
                                         THEN q.lock - make_interval(secs => %s) ELSE q.lock END, '-infinity')
                           <= statement_timestamp() - make_interval(secs => %s))
              FROM runs_clusterheartbeat h
             WHERE h.cluster = %s
            """,
            [queue_key(), settings.Q_CLUSTER["retry"], stall_after.total_seconds(), cluster],
        )
        row = cursor.fetchone()
    return Progress(*row) if row else None


def stall_reason(cluster: str, *, stall_after: timedelta) -> str | None:
    """Why the cluster counts as stalled (queued work waits, nothing started or finished), or None."""
    seen = progress(cluster, stall_after=stall_after)
    if seen is None:
        return None
    if seen.booting:
        booting_for = seen.now - seen.started_at
        if booting_for < max(stall_after, BOOT_TIMEOUT):
            return None  # Django and django-q2 take seconds to start, more on a loaded machine
        return f"no worker came up {booting_for.total_seconds():.0f}s after qcluster started"
    if not seen.waiting_tasks:
        return None
    idle_for = seen.now - seen.last_progress_at
    if idle_for < stall_after:
        return None
    task_timeout = timedelta(seconds=settings.Q_CLUSTER["timeout"])
    if seen.in_flight and seen.last_task_started_at and seen.now - seen.last_task_started_at < task_timeout:
        return None  # a long task is still inside django-q2's own timeout
    return (f"{seen.waiting_tasks} queued task(s) waited over {stall_after.total_seconds():g}s"
            f" and no task started or finished for {idle_for.total_seconds():.0f}s")


def queue_key() -> str:
    """The django-q2 ORM broker's queue name (its `list_key`, django-q2's Conf.CLUSTER_NAME)."""
    return settings.Q_CLUSTER.get("cluster_name") or settings.Q_CLUSTER["name"]
