"""Carries out the planned faults against the worker commands, the database and the fake provider.

Faults with a duration (a pause, a window, a database outage) start here and
end on a later tick (`finish_due`), so the harness keeps watching, starting
runs and dispatching while they last. `end_all` closes whatever is still open
before the settle phase.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

from django.db import connections

from chaos import observe
from chaos.cluster import WorkerCommand, signal_pid, wait_stopped
from chaos.database import PrivateDatabase
from chaos.provider import ChaosTwilio
from chaos.schedule import Fault

FAULT_POINTS = ("before_provider_call", "after_provider_call", "after_record")
RELAUNCH_AFTER_S = 1.0  # like a process manager's restart delay
# Faults that act on a worker holding a lease: a worker holds one only while it runs an episode, a few
# milliseconds at a time, so they are tried again at the harness's next tick rather than a second later.
BUSY_WORKER_KINDS = ("kill-busy", "stop")


def worker_faults_env(markers: Path) -> dict[str, str]:
    """The worker command's LUCIA_FAULTS: every point `:once`, disarmed until a marker is removed."""
    markers.mkdir(parents=True, exist_ok=True)
    for point in FAULT_POINTS:
        (markers / f"{point}.fired").touch()
    return {"LUCIA_FAULTS": ",".join(f"{point}:once" for point in FAULT_POINTS), "LUCIA_FAULTS_DIR": str(markers)}


class Injector:
    def __init__(self, *, rng: random.Random, commands: list[WorkerCommand], database: PrivateDatabase,
                 twilio: ChaosTwilio, markers: Path, log) -> None:
        self.rng = rng
        self.commands = commands
        self.database = database
        self.twilio = twilio
        self.markers = markers
        self.log = log
        self.injected: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.db_down = False
        self._endings: list[tuple[float, str, object]] = []
        self._relaunch_at: dict[int, float] = {}
        self._armed: set[str] = set()

    # --- starting faults -------------------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> bool:
        """Start `fault`; False when it cannot happen now (no such worker yet, database down): try again later."""
        if fault.kind in ("kill-idle", "kill-busy", "stop") and self.db_down:
            return False
        handler = getattr(self, "_" + fault.kind.replace("-", "_"))
        done = handler(fault)
        if done:
            self.injected[fault.kind] += 1
        return done

    def _kill_idle(self, fault: Fault) -> bool:
        return self._kill(busy=False)

    def _kill_busy(self, fault: Fault) -> bool:
        return self._kill(busy=True)

    def _kill(self, *, busy: bool) -> bool:
        pid = self._pick_worker(busy=busy)
        if pid is None or not signal_pid(pid, signal.SIGKILL):
            return False
        self.log(f"fault: SIGKILL {'busy' if busy else 'idle'} worker {pid}")
        return True

    def _stop(self, fault: Fault) -> bool:
        pid = self._pick_worker(busy=True)
        if pid is None or not signal_pid(pid, signal.SIGSTOP):
            return False
        if not wait_stopped(pid):
            signal_pid(pid, signal.SIGCONT)
            return False
        expired, spared = observe.expire_leases_of(pid)
        self.log(f"fault: SIGSTOP worker {pid} for {fault.hold_s:.1f} s, leases expired {expired}, spared {spared}")
        self._endings.append((time.monotonic() + fault.hold_s, "cont", (pid, expired)))
        return True

    def _cluster_kill(self, fault: Fault) -> bool:
        command = self.rng.choice([command for command in self.commands if command.alive] or [None])
        if command is None:
            return False
        killed = command.kill_all()
        self._relaunch_at[command.index] = time.monotonic() + RELAUNCH_AFTER_S
        self.log(f"fault: SIGKILL worker command {command.index} ({killed} processes)")
        return True

    def _crash(self, fault: Fault) -> bool:
        point = self.rng.choice(FAULT_POINTS)
        marker = self.markers / f"{point}.fired"
        if point in self._armed:
            return False
        marker.unlink(missing_ok=True)
        self._armed.add(point)
        self.log(f"fault: armed a crash at {point}")
        return True

    def _lookup_fail(self, fault: Fault) -> bool:
        self.twilio.lookups_down = True
        self._endings.append((time.monotonic() + fault.hold_s, "lookups-up", None))
        self.log(f"fault: every lookup fails for {fault.hold_s:.1f} s")
        return True

    def _outage(self, fault: Fault) -> bool:
        if self.twilio.down:
            return False
        self.twilio.go_down()
        self.notes["outage seconds"] += round(fault.hold_s)
        self._endings.append((time.monotonic() + fault.hold_s, "provider-up", None))
        self.log(f"fault: the Twilio fake refuses connections for {fault.hold_s:.1f} s")
        return True

    def _db_restart(self, fault: Fault) -> bool:
        if self.db_down:
            return False
        connections.close_all()
        self.database.stop(mode=fault.mode)
        self.db_down = True
        self.notes[f"db stop {fault.mode}"] += 1
        self._endings.append((time.monotonic() + fault.hold_s, "db-up", None))
        self.log(f"fault: PostgreSQL stopped ({fault.mode}) for {fault.hold_s:.1f} s")
        return True

    # --- ending faults and keeping the workers up -----------------------------------------------------------------

    def finish_due(self, *, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        due = [item for item in self._endings if item[0] <= now]
        self._endings = [item for item in self._endings if item[0] > now]
        for _, action, data in due:
            self._finish(action, data)
        self._note_fired_crashes()
        self._relaunch(now)

    def end_all(self) -> None:
        """Close every open window and pause now, disarm crashes, relaunch every worker command."""
        for _, action, data in self._endings:
            self._finish(action, data)
        self._endings = []
        self.twilio.lookups_down = False
        self._note_fired_crashes()
        for point in FAULT_POINTS:
            (self.markers / f"{point}.fired").touch()
        self._armed.clear()
        self._relaunch(float("inf"))

    def _finish(self, action: str, data: object) -> None:
        if action == "cont":
            pid, expired = data
            signal_pid(pid, signal.SIGCONT)
            if expired and not self.db_down:
                try:
                    now = observe.lease_epochs([run_id for run_id, _ in expired])
                    self.notes["stop: runs taken over"] += sum(now.get(run, 0) > epoch for run, epoch in expired)
                except Exception:  # the database is restarting; the count is only informative
                    connections.close_all()
        elif action == "lookups-up":
            self.twilio.lookups_down = False
        elif action == "provider-up":
            self.twilio.come_up()
        elif action == "db-up":
            self.database.start()
            self.db_down = False
            self.log("fault: PostgreSQL is back")

    def _note_fired_crashes(self) -> None:
        for point in list(self._armed):
            if (self.markers / f"{point}.fired").exists():
                self._armed.discard(point)
                self.notes[f"crash fired: {point}"] += 1

    def _relaunch(self, now: float) -> None:
        for command in self.commands:
            if command.reap_if_dead():
                self.log(f"worker command {command.index} exited on its own; relaunching")
                self._relaunch_at.setdefault(command.index, time.monotonic() + RELAUNCH_AFTER_S)
            if not command.alive and self._relaunch_at.get(command.index, 0) <= now:
                command.launch()
                self._relaunch_at.pop(command.index, None)

    def _pick_worker(self, *, busy: bool) -> int | None:
        workers = [pid for command in self.commands if command.alive for pid in command.workers()]
        try:
            leasing = observe.leasing_pids()
        except Exception:  # the database is restarting: pick later
            connections.close_all()
            return None
        candidates = [pid for pid in workers if (pid in leasing) == busy]
        return self.rng.choice(candidates) if candidates else None
