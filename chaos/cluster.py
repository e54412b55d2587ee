"""The worker command under chaos: launched as its own process group, its django-q2 workers found, killed, paused.

The command is one constant command line (`manage.py runworkers`, or bare
`manage.py qcluster`), launched the way a process manager would: a session
of its own, its output to a log file, relaunched after it dies. django-q2
forks its processes, so they all share the command line; the cluster's own
log names them ("... ready for work at <pid>", "... monitoring at <pid>",
"... pushing tasks at <pid>"), which tells a worker from the monitor and
the pusher.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from chaos.database import BASE_DIR

_WORKER_READY = re.compile(r"ready for work at (\d+)")
_TASK_STARTED = " processing "  # django-q2's worker logs "<name> processing <task> '<func>'" as it starts a task


class WorkerCommand:
    """One launch-and-relaunch slot for the worker command; `index` names it in logs and the table."""

    def __init__(self, index: int, *, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.index = index
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"workers-{index}.log"
        self.process: subprocess.Popen | None = None
        self.launches = 0
        self.unexpected_exits = 0
        self._worker_pids: set[int] = set()
        self._log_offset = 0
        # time.monotonic() of the last task a worker started, or of the launch; stalls counted by `check_stall`.
        self.last_task_at = 0.0
        self.stalls = 0
        self._stalled = False

    def launch(self) -> None:
        with self.log_path.open("a") as log:
            log.write(f"--- chaos: launch {self.launches + 1}: {' '.join(self.argv)}\n")
            log.flush()
            self.process = subprocess.Popen(  # noqa: S603 - the configured worker command
                self.argv, env=self.env, cwd=BASE_DIR, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.launches += 1
        self.excuse_stall()

    def excuse_stall(self) -> None:
        """Start the stall clock again (a launch, or the database coming back: no task could start before)."""
        self.last_task_at = time.monotonic()
        self._stalled = False

    def check_stall(self, *, work_waiting: bool, after_s: float) -> bool:
        """Count a stall when work is waiting and no worker of this command started a task for `after_s`.

        A frozen cluster (every process alive, nothing running: django-q2
        issue #23) looks exactly like this. Returns True when a new stall began.
        """
        self._read_log()
        if not work_waiting or not self.alive:
            if not work_waiting:
                self.excuse_stall()
            return False
        if time.monotonic() - self.last_task_at < after_s or self._stalled:
            return False
        self._stalled = True
        self.stalls += 1
        return True

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reap_if_dead(self) -> bool:
        """True when the command has exited on its own (not by this harness): the caller relaunches it."""
        if self.process is None or self.process.poll() is None:
            return False
        self.unexpected_exits += 1
        self.process = None
        return True

    def tree(self) -> list[psutil.Process]:
        """The command and every process under it (a supervisor's children run in groups of their own)."""
        if not self.alive:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def workers(self) -> list[int]:
        """PIDs of the live django-q2 worker processes under this command."""
        self._read_log()
        self._worker_pids &= {process.pid for process in self.tree()}
        return sorted(self._worker_pids)

    def kill_all(self) -> int:
        """SIGKILL the whole tree at once (every process group under it); returns how many processes."""
        processes = self.tree()
        for process in processes:
            try:
                process.send_signal(signal.SIGCONT)  # a paused process dies as well
                process.kill()
            except psutil.NoSuchProcess:
                pass
        if self.process is not None:
            self.process.wait(timeout=10)
        psutil.wait_procs(processes, timeout=5)
        self.process = None
        return len(processes)

    def stop(self, *, grace_s: float = 5.0) -> None:
        """End the command at the end of the run: SIGTERM to its group, then SIGKILL what is left."""
        if not self.alive:
            return
        processes = self.tree()
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _, left = psutil.wait_procs(processes, timeout=grace_s)
        for process in left:
            try:
                process.send_signal(signal.SIGCONT)
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait(timeout=10)
        self.process = None

    def _read_log(self) -> None:
        with self.log_path.open() as log:
            log.seek(self._log_offset)
            text = log.read()
            self._log_offset = log.tell()
        self._worker_pids.update(int(pid) for pid in _WORKER_READY.findall(text))
        if _TASK_STARTED in text:
            self.last_task_at = time.monotonic()
            self._stalled = False


def signal_pid(pid: int, signum: int) -> bool:
    """Send `signum`; False when the process is already gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def wait_stopped(pid: int, *, seconds: float = 2.0) -> bool:
    """Whether the process reached the stopped state (T) within `seconds`."""
    tick = threading.Event()
    for _ in range(int(seconds / 0.02)):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                return True
        except psutil.NoSuchProcess:
            return False
        tick.wait(0.02)
    return False
