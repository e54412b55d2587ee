"""Chaos workers: forked children running the real runtime (dispatch.reap_expired, worker.advance_run)
against the test database, each with its own connection and an optional fault point armed; and their logs."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from django.db import connections

from runs import dispatch, faults, worker
from tests.chaos.db import POLL_S, due_run_ids, expire_leases, owners_of

# --- Worker processes ---------------------------------------------------------------------------------------------


@dataclass
class Worker:
    index: int
    process: multiprocessing.Process
    fault: str | None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def owners(self) -> list[str]:
        return owners_of(self.pid)


def preload() -> None:
    """Import what the runtime loads on first use before forking, so each worker starts working at once."""
    import twilio.rest.api.v2010.account.message  # noqa: F401

    import runs.loop  # noqa: F401
    from connectors import registry

    registry.connector_class("sms")


def spawn(index: int, *, fault: str | None, until: float, log_dir: Path) -> Worker:
    """Fork a worker that loops until `until` (time.monotonic(), shared by forked processes)."""
    connections.close_all()  # the child opens its own connection; a shared socket would corrupt both
    process = multiprocessing.get_context("fork").Process(
        target=_work, args=(index, fault, until, str(log_dir)), daemon=True, name=f"chaos-worker-{index}")
    process.start()
    return Worker(index=index, process=process, fault=fault)


def _work(index: int, fault: str | None, until: float, log_dir: str) -> None:
    """The worker loop: reap what dead workers left, advance every due run, idle briefly when nothing is due."""
    from django.conf import settings

    settings.LUCIA_FAULTS = [fault] if fault else []
    logging.getLogger("twilio").setLevel(logging.WARNING)  # every request at INFO: noise, and time
    logging.getLogger("runs.worker").addHandler(_FencedLog(Path(log_dir) / f"fenced-{index}-{os.getpid()}.log"))
    owner = owners_of(os.getpid())[0]
    shuffle = random.Random(os.getpid()).shuffle
    idle = threading.Event()
    errors = Path(log_dir) / f"errors-{index}-{os.getpid()}.jsonl"
    while time.monotonic() < until:
        run_ids: list[int] = []
        try:
            dispatch.reap_expired()
            run_ids = due_run_ids()
            shuffle(run_ids)  # workers contend for the same runs, in different orders
            for run_id in run_ids:
                if time.monotonic() >= until:
                    break
                worker.advance_run(run_id, owner=owner)
        except Exception as exc:  # any exception escaping the runtime is a finding: recorded, the loop goes on
            with errors.open("a") as out:
                out.write(json.dumps({"worker": index, "pid": os.getpid(), "error": repr(exc),
                                      "traceback": traceback.format_exc()}) + "\n")
            connections.close_all()
        if not run_ids:
            idle.wait(POLL_S)
    connections.close_all()


@dataclass
class Paused:
    """A worker that stopped itself (SIGSTOP) at a fault point, inside advance_run."""

    process: multiprocessing.Process

    @property
    def pid(self) -> int:
        return self.process.pid

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)


def spawn_paused_at(point: str, run_id: int, *, log_dir: Path, seconds: float = 10.0) -> Paused:
    """Fork a worker advancing `run_id` that stops itself at fault point `point`; returns once it is stopped."""
    connections.close_all()
    process = multiprocessing.get_context("fork").Process(
        target=_work_once, args=(point, run_id, str(log_dir)), daemon=True, name="chaos-paused-worker")
    process.start()
    paused = Paused(process)
    deadline = time.monotonic() + seconds
    tick = threading.Event()
    while not _stopped(paused.pid):
        if not process.is_alive() or time.monotonic() > deadline:
            paused.resume()
            raise AssertionError(f"the worker never reached {point} (exit code {process.exitcode})")
        tick.wait(POLL_S)
    return paused


def crash_at(point: str, run_id: int, *, log_dir: Path) -> int:
    """Advance `run_id` in a forked worker that dies at fault point `point`; returns its exit code.

    Its lease is expired at once, so the next worker recovers what it left.
    """
    connections.close_all()
    process = multiprocessing.get_context("fork").Process(
        target=_work_once, args=(point, run_id, str(log_dir)), kwargs={"pause": False}, daemon=True)
    process.start()
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)
    expire_leases(owners_of(process.pid))
    return process.exitcode


def _work_once(point: str, run_id: int, log_dir: str, *, pause: bool = True) -> None:
    from django.conf import settings

    def stop_here(name: str) -> None:
        if name == point:
            os.kill(os.getpid(), signal.SIGSTOP)  # a pause (GC, VM steal, SIGSTOP) exactly here

    if pause:
        faults.point = stop_here
    else:
        settings.LUCIA_FAULTS = [point]
    try:
        worker.advance_run(run_id, owner=owners_of(os.getpid())[0])
    except Exception as exc:
        with (Path(log_dir) / f"errors-once-{os.getpid()}.jsonl").open("a") as out:
            out.write(json.dumps({"pid": os.getpid(), "error": repr(exc), "traceback": traceback.format_exc()}) + "\n")
    connections.close_all()


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] == "T"


class _FencedLog(logging.Handler):
    """Notes each time advance_run stopped on LeaseLost: a zombie that the fence turned away."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.WARNING)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("run %s: stopped"):
            with self.path.open("a") as out:
                out.write(record.getMessage() + "\n")


def fenced_stops(log_dir: Path) -> int:
    """How many times a worker's advance_run was stopped by LeaseLost."""
    return sum(len(path.read_text().splitlines()) for path in log_dir.glob("fenced-*.log"))


def worker_errors(log_dir: Path) -> list[dict]:
    paths = sorted(log_dir.glob("errors-*.jsonl"))
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]
