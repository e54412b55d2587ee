"""Run a django-q2 cluster as a child and restart it when it exits or stops making progress.

`python manage.py runworkers` is the documented way to run workers. The child is
`manage.py qcluster` in its own process group, so a restart kills every process
of the cluster (sentinel, workers, pusher, monitor) and nothing of a wedged one
survives. Progress is read from the cluster heartbeat (runs.heartbeats), on the
database clock. Between checks the supervisor dispatches due episodes itself,
every LUCIA_DISPATCH_INTERVAL seconds, so a follow-up due in two seconds does not
wait for the every-minute schedule. The invariants never depend on any of this:
leases and the outbox hold whatever a restart interrupts.
"""

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection

from runs import dispatch, heartbeats

logger = logging.getLogger(__name__)

# A cluster that dies at once (database down, broken settings) is restarted with a growing pause.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A SIGTERMed qcluster stops its workers gracefully; past this it is killed.
STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass
class Supervisor:
    cluster: str
    stall_after: timedelta
    check_every: float
    dispatch_every: float
    stop: threading.Event = field(default_factory=threading.Event)
    child: subprocess.Popen | None = None
    registered: bool = False
    backoff: float = FIRST_BACKOFF_SECONDS
    started_monotonic: float = 0.0

    def run(self) -> None:
        """Supervise until `stop` is set, then stop the cluster."""
        logger.info("supervising cluster %s (stall after %ss)", self.cluster, self.stall_after.total_seconds())
        next_check = next_dispatch = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.child is None:
                    self._start()
                elif self.child.poll() is not None:
                    self._restart(f"qcluster exited with status {self.child.returncode}")
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + self.check_every
                    self._check()
                if self.dispatch_every > 0 and now >= next_dispatch:
                    next_dispatch = now + self.dispatch_every
                    self._dispatch()
                self.stop.wait(min(self.check_every, self.dispatch_every or self.check_every, 1.0))
        finally:
            self._stop_child()

    def _start(self) -> None:
        env = {**os.environ, "LUCIA_WORKER_CLUSTER": self.cluster}
        self.child = subprocess.Popen(  # noqa: S603 (fixed argv: this interpreter, this project's manage.py)
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"],
            cwd=settings.BASE_DIR, env=env, start_new_session=True, preexec_fn=_stop_with_parent,
        )
        self.started_monotonic = time.monotonic()
        self.registered = False
        logger.info("cluster %s: started qcluster (pid %s)", self.cluster, self.child.pid)
        self._register()

    def _register(self) -> None:
        try:
            heartbeats.register(self.cluster, pid=self.child.pid,
                                running_for=time.monotonic() - self.started_monotonic)
            self.registered = True
        except DatabaseError as exc:
            self._database_failed("register the cluster", exc)

    def _restart(self, reason: str) -> None:
        logger.warning("cluster %s: restarting qcluster (pid %s): %s", self.cluster, self.child.pid, reason)
        self._kill_child()
        if time.monotonic() - self.started_monotonic < 60:
            self.stop.wait(self.backoff)
            self.backoff = min(self.backoff * 2, MAX_BACKOFF_SECONDS)
        else:
            self.backoff = FIRST_BACKOFF_SECONDS
        try:
            heartbeats.record_restart(self.cluster, reason=reason)
        except DatabaseError as exc:
            self._database_failed("record the restart", exc)
        if not self.stop.is_set():
            self._start()

    def _check(self) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        try:
            if not self.registered:
                self._register()
                return
            released = release_orphaned_tasks(started_after=self.started_monotonic, stall_after=self.stall_after)
            if released:
                logger.warning("cluster %s: released %s queued task(s) a dead cluster had taken", self.cluster,
                               released)
            reason = heartbeats.stall_reason(self.cluster, stall_after=self.stall_after)
        except DatabaseError as exc:
            self._database_failed("check progress", exc)
            return
        if reason:
            self._restart(f"stalled: {reason}")

    def _dispatch(self) -> None:
        try:
            dispatch.dispatch_due()
        except DatabaseError as exc:
            self._database_failed("dispatch due episodes", exc)
        except Exception:  # a bug in the dispatcher must not stop supervision; the next interval tries again
            logger.exception("cluster %s: dispatch_due failed", self.cluster)

    def _database_failed(self, action: str, exc: DatabaseError) -> None:
        logger.warning("cluster %s: could not %s: %s", self.cluster, action, exc.__class__.__name__)
        connection.close()  # a broken connection (database restarted) is reopened on the next use

    def _kill_child(self) -> None:
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.child.wait()

    def _stop_child(self) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        logger.info("cluster %s: stopping qcluster (pid %s)", self.cluster, self.child.pid)
        self.child.send_signal(signal.SIGTERM)
        try:
            self.child.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            logger.warning("cluster %s: qcluster did not stop in %ss, killing it", self.cluster, STOP_GRACE_SECONDS)
        self._kill_child()  # the rest of the group too, if the sentinel left anything behind


def release_orphaned_tasks(*, started_after: float, stall_after: timedelta) -> int:
    """Hand back queue rows a killed cluster had taken; returns how many.

    django-q2 locks a taken row for Q_CLUSTER["retry"] seconds (the row's `lock`
    is the time taken plus retry) and deletes it when the result is acknowledged.
    A row taken before this supervisor's current qcluster started, and longer than
    the stall time ago, belongs to a cluster that is dead or stuck: a live one
    acknowledges within seconds. Releasing it makes it runnable now instead of
    after the retry time. The worst case, a long task of another live cluster, is
    a duplicate delivery, which every Lucia task tolerates (leases fence them).
    """
    started_seconds_ago = max(time.monotonic() - started_after, 0.0)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE django_q_ormq SET lock = statement_timestamp()
             WHERE key = %s AND lock > statement_timestamp()
               AND lock - make_interval(secs => %s)
                   <= statement_timestamp() - make_interval(secs => greatest(%s, %s))
            """,
            [heartbeats.queue_key(), settings.Q_CLUSTER["retry"], started_seconds_ago, stall_after.total_seconds()],
        )
        return cursor.rowcount


def _stop_with_parent() -> None:
    """In the child before exec: SIGTERM it (a graceful qcluster stop) if the supervisor dies abruptly."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: an orphaned qcluster keeps running until stopped by hand


def default_cluster_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
