"""What the chaos suite reads and forces in the database: lease owners, due runs, expired leases."""

from __future__ import annotations

import socket

from django.db import OperationalError, connection, transaction

from runs import dispatch

POLL_S = 0.05
# The parent never waits on a row a paused worker has locked inside a fence.
LOCK_TIMEOUT = "300ms"


def owners_of(pid: int) -> list[str]:
    """The lease owners a worker process uses, as LIKE patterns: its own and its reaper's (dispatch.reap_expired,
    which adds a token of its own to each pass's name)."""
    return [f"chaos:{pid}", f"reaper:{socket.gethostname()}:{pid}:%"]


def due_run_ids() -> list[int]:
    """Real runs with a due episode and no live lease: what dispatch_due would enqueue.

    These workers take runs directly, not from django-q2's queue, so a task still waiting there
    (advance_enqueued_at) does not hold a run back: a negative stale age makes every such mark stale.
    """
    with connection.cursor() as cursor:
        cursor.execute(dispatch.DUE_RUNS_SQL, {"stale_secs": -3600, "backed_secs": 0, "skip": [], "limit": 500})
        return [row[0] for row in cursor.fetchall()]


def expire_leases(owners: list[str] | None = None, *, sparing: list[int] = ()) -> list[tuple[int, int]]:
    """Expire the leases `owners` (LIKE patterns) hold (all leases when None), except on runs `sparing`:
    [(run id, epoch)].

    Empty when a run row is locked by a paused worker's open fence (the lock
    timeout): that worker still holds its transaction, nothing is taken from it.
    """
    where = "lease_owner IS NOT NULL" if owners is None else "lease_owner LIKE ANY(%s)"
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(
                f"UPDATE runs_run SET lease_expires_at = statement_timestamp() - interval '1 second'"  # noqa: S608
                f" WHERE {where} AND NOT id = ANY(%s) RETURNING id, lease_epoch",
                ([] if owners is None else [owners]) + [list(sparing)],
            )
            return [(row[0], row[1]) for row in cursor.fetchall()]
    except OperationalError:
        return []


def lease_epochs(run_ids: list[int]) -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, lease_epoch FROM runs_run WHERE id = ANY(%s)", [run_ids])
        return dict(cursor.fetchall())


def sending_run_ids(owners: list[str]) -> list[int]:
    """Runs whose lease `owners` (LIKE patterns) hold that have an outbox row in `sending` (a provider call may
    be next)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT r.id FROM runs_run r JOIN runs_outboxmessage o ON o.run_id = r.id"
            " WHERE r.lease_owner LIKE ANY(%s) AND o.status = 'sending'", [owners])
        return [row[0] for row in cursor.fetchall()]
