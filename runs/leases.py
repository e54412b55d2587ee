"""One writer per run: claim, heartbeat, fence, release (DESIGN §5).

Leases run on the database's clock so that workers with skewed clocks agree:
`statement_timestamp()`, not `now()`, which stays fixed for a whole
transaction and would be stale inside a caller's longer one. Every write of an episode goes through `fence`, which
locks the run row and checks the epoch first: a worker that lost its lease
(paused, partitioned, reaped) writes nothing.
"""

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence

from django.conf import settings
from django.db import connection, transaction

from runs.models import Run

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The run's lease epoch moved: another worker owns it now."""


def claim(run_id: int, *, owner: str) -> int | None:
    """Take the run's lease if it is free or expired; returns the new epoch, or None if it is held."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_run
               SET lease_owner = %s, lease_epoch = lease_epoch + 1,
                   lease_expires_at = statement_timestamp() + make_interval(secs => %s)
             WHERE id = %s AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp())
         RETURNING lease_epoch
            """,
            [owner, settings.LUCIA_LEASE_SECONDS, run_id],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def renew(run_id: int, *, epoch: int) -> bool:
    """Extend the lease; False means it was lost and the holder must stop."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_run SET lease_expires_at = statement_timestamp() + make_interval(secs => %s)
             WHERE id = %s AND lease_epoch = %s AND lease_owner IS NOT NULL
            """,
            [settings.LUCIA_LEASE_SECONDS, run_id, epoch],
        )
        return cursor.rowcount == 1


def release(run_id: int, *, epoch: int) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET lease_owner = NULL, lease_expires_at = NULL WHERE id = %s AND lease_epoch = %s",
            [run_id, epoch],
        )


@contextlib.contextmanager
def fence(run_id: int, *, epoch: int, select_related: Sequence[str] = ()) -> Iterator[Run]:
    """A transaction in which the run row is locked and still ours; raises LeaseLost otherwise.

    Keep the body short and free of network calls: the row lock is held until it ends.
    `select_related` rows come along in the same query, unlocked (`of`: only the run row is locked).
    """
    with transaction.atomic():
        runs = Run.objects.select_related(*select_related) if select_related else Run.objects
        run = runs.select_for_update(no_key=True, of=("self",)).get(pk=run_id)
        if run.lease_epoch != epoch or run.lease_owner is None:
            raise LeaseLost(f"run {run_id}: lease epoch is {run.lease_epoch}, this worker holds {epoch}")
        yield run


class Heartbeat:
    """Renews a lease from a thread every LUCIA_HEARTBEAT_SECONDS; sets `lost` when renewal fails.

    The worker checks `lost` (or calls `check()`) between steps; the fence
    stops any write that slips through.
    """

    def __init__(self, run_id: int, *, epoch: int, interval: float | None = None) -> None:
        self.run_id = run_id
        self.epoch = epoch
        self.interval = interval if interval is not None else settings.LUCIA_HEARTBEAT_SECONDS
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run {self.run_id}: heartbeat lost the lease (epoch {self.epoch})")

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                if not renew(self.run_id, epoch=self.epoch):
                    logger.warning("run %s: lease epoch %s lost", self.run_id, self.epoch)
                    self.lost.set()
                    return
        except Exception:
            # A heartbeat that cannot reach the database cannot vouch for the lease.
            logger.exception("run %s: heartbeat failed", self.run_id)
            self.lost.set()
        finally:
            connection.close()
