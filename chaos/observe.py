"""What the chaos run reads from (and forces in) its private database while it runs.

Every function here may meet a database that is restarting; callers treat an
OperationalError as "ask again later" (see chaos.harness).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from django.db import connection, transaction

# The harness never waits on a run row that a paused worker has locked inside a fence.
LOCK_TIMEOUT = "300ms"

PROGRESS_SQL = """
SELECT (SELECT count(*) FROM runs_run WHERE NOT sim),
       (SELECT count(*) FROM runs_episode e JOIN runs_run r ON r.id = e.run_id
         WHERE NOT r.sim AND e.status IN ('done', 'failed', 'cancelled')),
       (SELECT count(*) FROM runs_episode e JOIN runs_run r ON r.id = e.run_id
         WHERE NOT r.sim AND e.status = 'running'),
       (SELECT count(*) FROM runs_episode e JOIN runs_run r ON r.id = e.run_id
         WHERE NOT r.sim AND e.status = 'queued' AND e.due_at <= statement_timestamp()),
       (SELECT count(*) FROM runs_episode e JOIN runs_run r ON r.id = e.run_id
         WHERE NOT r.sim AND e.status IN ('queued', 'running')),
       (SELECT count(*) FROM runs_outboxmessage WHERE status = 'sent'),
       (SELECT count(*) FROM runs_outboxmessage WHERE status = 'uncertain'),
       (SELECT count(*) FROM django_q_ormq WHERE lock IS NULL)
"""


@dataclass
class Progress:
    runs: int
    episodes_finished: int
    running: int
    due: int
    unsettled: int  # episodes queued (due or not) or running
    sent: int
    uncertain: int
    queued_tasks: int

    def line(self) -> str:
        return (f"runs {self.runs} · episodes {self.episodes_finished} finished, {self.running} running, "
                f"{self.due} due · sends {self.sent} sent, {self.uncertain} uncertain · q2 queue {self.queued_tasks}")


def progress() -> Progress:
    with connection.cursor() as cursor:
        cursor.execute(PROGRESS_SQL)
        return Progress(*cursor.fetchone())


def queued_tasks() -> int:
    """Tasks a worker can still pick up from django-q2's ORM broker.

    A task a pusher dequeued carries a `lock` time and stays invisible for the
    cluster's `retry` seconds; when its cluster was killed it is lost until
    then, so it does not count as queued.
    """
    from django.conf import settings

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_q_ormq WHERE lock IS NULL"
                       " OR lock < statement_timestamp() - make_interval(secs => %s)",
                       [settings.Q_CLUSTER["retry"]])
        return cursor.fetchone()[0]


def owner_pid(owner: str) -> int | None:
    """The process id in a lease owner: `host:pid:thread:token` (runs.worker) or `reaper:host:pid:token`
    (runs.dispatch)."""
    parts = owner.split(":")
    field = parts[2] if parts[0] == "reaper" and len(parts) == 4 else parts[1] if len(parts) == 4 else None
    return int(field) if field and field.isdigit() else None


def leasing_pids() -> set[int]:
    """Processes on this host holding a live lease: the busy workers."""
    host = socket.gethostname()
    with connection.cursor() as cursor:
        cursor.execute("SELECT lease_owner FROM runs_run WHERE lease_owner IS NOT NULL"
                       " AND lease_expires_at > statement_timestamp()")
        owners = [row[0] for row in cursor.fetchall() if host in row[0]]
    return {pid for owner in owners if (pid := owner_pid(owner)) is not None}


def expire_leases_of(pid: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Expire the leases process `pid` holds, except on runs with an outbox row in `sending`.

    Returns ([(run id, epoch) expired], [run ids spared]). A worker stopped
    between writing `sending` and its request leaving the process is the one
    instant no fence covers (tests/chaos/test_chaos.py, last test): such a run
    is left to its paused owner, so a duplicate can only mean a real defect.
    Empty when a row is locked by the paused worker's open fence: it still
    holds its transaction, nothing is taken from it.
    """
    pattern = [f"%:{pid}:%", f"reaper:%:{pid}:%"]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(
                "SELECT DISTINCT r.id FROM runs_run r JOIN runs_outboxmessage o ON o.run_id = r.id"
                " WHERE r.lease_owner LIKE ANY(%s) AND o.status = 'sending'", [pattern])
            spared = [row[0] for row in cursor.fetchall()]
            cursor.execute(
                "UPDATE runs_run SET lease_expires_at = statement_timestamp() - interval '1 second'"
                " WHERE lease_owner LIKE ANY(%s) AND lease_expires_at > statement_timestamp()"
                " AND NOT id = ANY(%s) RETURNING id, lease_epoch", [pattern, spared])
            return [(row[0], row[1]) for row in cursor.fetchall()], spared
    except Exception:  # a lock timeout, or the database restarting: take nothing this time
        return [], []


def lease_epochs(run_ids: list[int]) -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, lease_epoch FROM runs_run WHERE id = ANY(%s)", [run_ids])
        return dict(cursor.fetchall())
