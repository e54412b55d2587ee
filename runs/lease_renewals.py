"""A held lease's renewals while its holder works (DESIGN §5): one heartbeat thread per process renews every lease
the process holds, each on its own schedule, on the thread's own connection.

(runs.heartbeats is another heartbeat: the worker cluster's, for the health page.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator

import psycopg
from django.conf import settings
from django.db import OperationalError, connection

from runs import leases

logger = logging.getLogger(__name__)


class Heartbeat:
    """Renews a lease every LUCIA_HEARTBEAT_SECONDS while its holder works (`with`); sets `lost` when a renewal
    fails or cannot reach the database.

    The worker checks `lost` (or calls `check()`) between steps; the fence stops any write that slips through.
    The renewals come from the process's heartbeat thread (`_Beater`), on that thread's connection: entering and
    leaving register and unregister the lease, so an advance_run of a few milliseconds, which never needs a
    renewal, pays for no thread of its own.
    """

    def __init__(self, run_id: int, *, epoch: int, owner: str | None = None, interval: float | None = None) -> None:
        self.run_id = run_id
        self.epoch = epoch
        self.owner = owner
        self.interval = interval if interval is not None else settings.LUCIA_HEARTBEAT_SECONDS
        self.lost = threading.Event()
        self.due = 0.0  # time.monotonic() of the next renewal; the beater's, under its lock
        self.retry_soon = False  # the last renewal timed out on the run row's lock

    def __enter__(self) -> Heartbeat:
        _beater.register(self)
        return self

    def __exit__(self, *exc_info) -> None:
        _beater.unregister(self)

    def check(self) -> None:
        if self.lost.is_set():
            raise leases.LeaseLost(f"run {self.run_id}: heartbeat lost the lease (epoch {self.epoch})")

    def _renew_once(self) -> bool:
        """Renew the lease once, on the beater thread's own connection (only the beater calls it: it bounds that
        connection's lock waits, `_bound_lock_waits`, which a worker's connection must not get); False (and `lost`
        set) when it is lost. A renewal that timed out waiting for the run row's lock keeps the lease (it is still
        held, and the writer holding the row may be its own holder's fence, which extends it) and is tried again
        sooner (`retry_soon`)."""
        self.retry_soon = False
        try:
            _bound_lock_waits()
            if leases.renew(self.run_id, epoch=self.epoch, owner=self.owner):
                return True
            logger.warning("run %s: lease epoch %s lost", self.run_id, self.epoch)
        except OperationalError as error:
            if isinstance(error.__cause__, psycopg.errors.LockNotAvailable):
                logger.warning("run %s: lease renewal waited too long for the run's row; trying again", self.run_id)
                self.retry_soon = True
                return True
            self._unreachable()
        except Exception:
            self._unreachable()
        self.lost.set()
        return False

    def _unreachable(self) -> None:
        # A heartbeat that cannot reach the database cannot vouch for the lease.
        logger.exception("run %s: heartbeat failed", self.run_id)
        with contextlib.suppress(Exception):
            connection.close()  # perhaps broken: the next renewal connects afresh


def lock_wait_seconds() -> float:
    """How long a renewal waits for the run row's lock: the beater renews one lease at a time, so a renewal stuck
    behind a writer (a long transaction on the run) would hold up every other lease of the process."""
    return min(5.0, settings.LUCIA_HEARTBEAT_SECONDS / 4)


def _bound_lock_waits() -> None:
    """Set the calling thread's connection's lock_timeout, once per connection and value (the beater's own
    connection: no worker's)."""
    connection.ensure_connection()
    timeout = f"{max(1, round(lock_wait_seconds() * 1000))}ms"  # 0 would mean no timeout at all
    if _bounded.get(connection.connection) != timeout:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [timeout])
        _bounded[connection.connection] = timeout


_bounded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> the lock_timeout it was given


class _Beater:
    """The process's heartbeat thread: renews each registered lease when it falls due, one at a time, on its own
    connection (never a worker's). Started by the first registration; a daemon, so it keeps no process alive.

    Registering costs a set insertion under the lock: the thread also wakes every LUCIA_HEARTBEAT_SECONDS when
    idle, so a lease registered with that interval falls due no earlier than its next wake and needs no signal.
    A lease that falls due earlier (a shorter interval) wakes it. Its connection is closed once no lease is left to
    renew, before any other renewal: a worker process holds a second connection only while one of its steps
    outlasts an interval, and a connection cut meanwhile (a database restart between two advance_runs) never
    fails the next holder's renewal.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # a lease due before the thread's next wake, or none left
        self._settled = threading.Condition(self._lock)  # a renewal came back
        self._leases: set[Heartbeat] = set()
        self._renewing: Heartbeat | None = None
        self._wakes_at = 0.0
        self._connected = False
        self._disconnect = False  # no lease left since the last renewal: the next one starts on a new connection
        self._thread: threading.Thread | None = None

    def register(self, heartbeat: Heartbeat) -> None:
        with self._lock:
            heartbeat.due = time.monotonic() + heartbeat.interval
            self._leases.add(heartbeat)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
                self._thread.start()  # it waits for the lock: its first look at the leases sees this one
            elif heartbeat.due < self._wakes_at:
                self._wake.notify()

    def unregister(self, heartbeat: Heartbeat) -> None:
        """No renewal of the lease starts after this returns, and one under way is waited for (up to 5 s): the holder
        goes on to release its lease (or claim it again) with no renewal behind it. A renewal slower than that is
        still harmless: it is conditioned on the epoch and on a held lease (leases.renew), so it cannot revive a
        lease released or taken since."""
        with self._lock:
            self._leases.discard(heartbeat)
            if self._renewing is heartbeat:
                self._settled.wait_for(lambda: self._renewing is not heartbeat, timeout=5)
            if not self._leases and self._connected:
                self._disconnect = True
                self._wake.notify()

    def _run(self) -> None:
        with self._lock:
            while True:
                if self._disconnect or (not self._leases and self._connected):
                    self._disconnect = self._connected = False
                    with self._unlocked(), contextlib.suppress(Exception):
                        connection.close()
                    continue
                now = time.monotonic()
                due = next((heartbeat for heartbeat in self._leases if heartbeat.due <= now), None)
                if due is not None:
                    self._renew(due)
                    continue
                idle = now + settings.LUCIA_HEARTBEAT_SECONDS
                self._wakes_at = min([heartbeat.due for heartbeat in self._leases] + [idle])
                self._wake.wait(self._wakes_at - now)

    def _renew(self, heartbeat: Heartbeat) -> None:
        """Renew one lease with the lock let go (the round trip must not hold up registrations)."""
        self._renewing, self._connected = heartbeat, True
        try:
            with self._unlocked():
                kept = heartbeat._renew_once()
        finally:
            self._renewing = None
            self._settled.notify_all()
        if kept:
            wait = min(heartbeat.interval, lock_wait_seconds()) if heartbeat.retry_soon else heartbeat.interval
            heartbeat.due = time.monotonic() + wait
        else:
            self._leases.discard(heartbeat)  # lost for good: nothing left to renew

    @contextlib.contextmanager
    def _unlocked(self) -> Iterator[None]:
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()


_beater = _Beater()


def _forget_beater() -> None:
    """A forked child holds none of its parent's leases, has no heartbeat thread, and may have inherited the lock
    held: it starts afresh."""
    global _beater
    _beater = _Beater()


os.register_at_fork(after_in_child=_forget_beater)
