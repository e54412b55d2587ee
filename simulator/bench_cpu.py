"""CPU time of a bench process and of the PostgreSQL backend serving its connection (`manage.py bench`).

The throughput figures compare wall time; these say where it goes. A machine of N cores running workers and
PostgreSQL side by side does at most N / (CPU per episode, worker and backend together) episodes per second, however
many processes take part. The backend's CPU is read from /proc, which shows it only when the server runs on this
machine; against a remote server it is None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# The backend's utime and stime in /proc/<pid>/stat: fields 14 and 15, counted after the command's closing
# parenthesis (the command may hold spaces).
_UTIME, _STIME = 11, 12
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class Spent:
    """CPU seconds of a stretch of work: the process's own, and its backend's (None: not on this machine)."""

    worker: float
    backend: float | None

    def __add__(self, other: Spent) -> Spent:
        backend = None if self.backend is None or other.backend is None else self.backend + other.backend
        return Spent(worker=self.worker + other.worker, backend=backend)


NOTHING = Spent(worker=0.0, backend=0.0)


class Meter:
    """Started on a connection's backend (psycopg's `info`: its host and backend_pid); `spent()` is the CPU
    used by this process and by that backend since."""

    def __init__(self, info) -> None:
        self.stat = _stat_path(info)
        self.worker, self.backend = time.process_time(), _backend_seconds(self.stat)

    def spent(self) -> Spent:
        backend = _backend_seconds(self.stat)
        return Spent(worker=time.process_time() - self.worker,
                     backend=None if backend is None or self.backend is None else backend - self.backend)


def _stat_path(info) -> Path | None:
    """/proc/<pid>/stat of the backend, when the server is local and the process there is PostgreSQL's."""
    host = info.host or ""
    if not (host.startswith("/") or host in _LOCAL_HOSTS):
        return None
    path = Path(f"/proc/{info.backend_pid}")
    try:
        if path.joinpath("comm").read_text().strip() != "postgres":
            return None
    except OSError:
        return None
    return path / "stat"


def _backend_seconds(stat: Path | None) -> float | None:
    if stat is None:
        return None
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:  # the backend has gone
        return None
    return (int(fields[_UTIME]) + int(fields[_STIME])) / _TICKS_PER_S
