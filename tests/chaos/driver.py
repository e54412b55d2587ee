"""The chaos controller that kills and pauses workers, the Twilio fake whose lookups fail, and the settling pass.

Workers are forked children running the real runtime (dispatch.reap_expired,
worker.advance_run) against the test database, each with its own connection
and an optional fault point armed. The parent controls time where it can:
it expires leases in SQL instead of sleeping past them (the follow-up ladder
keeps its own clock in the run's state, so its seconds-long delays are waited
for). Every loop and wait here is bounded.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from runs import dispatch, faults, worker
from tests.chaos.db import POLL_S, due_run_ids, expire_leases, lease_epochs, sending_run_ids
from tests.chaos.workers import Worker, preload, spawn
from tests.fakes.provider_server import Recorded, Reply
from tests.fakes.twilio_server import TwilioServer


class ChaosTwilio(TwilioServer):
    """The Twilio fake whose lookup (the Messages list call) fails for some recipients, or for everyone for a while.

    Creates always work: what fails is the question "was this sent?".
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lookup_down = False
        self.lookup_down_for: set[str] = set()

    def respond(self, request: Recorded) -> Reply:
        if request.method == "GET" and (self.lookup_down or request.first("To") in self.lookup_down_for):
            return Reply(500, {"code": 20500, "message": "Internal Server Error", "status": 500})
        return super().respond(request)

    @property
    def failed_lookups(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "GET" and getattr(r, "failed", False)]

    def handle(self, request: Recorded) -> Reply:
        reply = super().handle(request)
        request.failed = reply.status >= 500  # type: ignore[attr-defined]
        return reply


# --- The controller -------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    spawned: int = 0
    killed: int = 0
    paused: int = 0
    # Pauses during which another worker took over a run the paused one held: the resumed one was a zombie.
    zombies: int = 0
    fault_exits: int = 0
    other_exits: list[int] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


class Controller:
    """Keeps `size` workers alive until `until`, killing and pausing them at random (seeded)."""

    def __init__(self, *, rng: random.Random, size: int, until: float, log_dir: Path, fault_rate: float,
                 fault_points: tuple[str, ...] = ("after_provider_call",), max_spawns: int = 24,
                 spare_unfenced_sends: bool = True) -> None:
        self.rng = rng
        self.size = size
        self.until = until
        self.log_dir = log_dir
        self.fault_rate = fault_rate
        self.fault_points = fault_points
        self.max_spawns = max_spawns
        self.spare_unfenced_sends = spare_unfenced_sends
        self.workers: list[Worker] = []
        self.tally = Tally()
        self._tick = threading.Event()

    def start(self, *, armed_first: int = 1) -> None:
        preload()
        for position in range(self.size):
            self._spawn(fault=self.fault_points[position % len(self.fault_points)] if position < armed_first
                        else None)

    def step(self) -> None:
        """One controller tick: replace dead workers, then maybe kill or pause one."""
        self._replace_dead()
        roll = self.rng.random()
        if roll < 0.25:
            self.kill()
        elif roll < 0.55:
            self.pause()

    def run(self, *, chaos_until: float, until_true: Callable[[], bool] | None = None,
            tick_s: tuple[float, float] = (0.15, 0.4)) -> None:
        """Tick until `chaos_until`, or sooner once `until_true()` holds."""
        while time.monotonic() < chaos_until and not (until_true and until_true()):
            self.step()
            self._tick.wait(self.rng.uniform(*tick_s))
        self._replace_dead()

    def kill(self, target: Worker | None = None) -> Worker | None:
        """SIGKILL a worker (one holding a lease when there is one); its leases expire at once."""
        target = target or self._pick()
        if target is None:
            return None
        os.kill(target.pid, signal.SIGKILL)
        target.process.join(timeout=5)
        self.workers.remove(target)
        self.tally.killed += 1
        expired = expire_leases(target.owners)
        self.tally.events.append(f"kill w{target.index} pid={target.pid} leases={expired}")
        return target

    def pause(self, target: Worker | None = None, *, takeover_s: float = 1.0) -> Worker | None:
        """SIGSTOP a worker past its lease (expired in SQL), let others take its runs over, then SIGCONT it.

        The resumed worker is a zombie for every run taken over: the fence must stop its writes.
        With `spare_unfenced_sends`, a run with a row in `sending` is not taken from a paused worker:
        it may be stopped between that write and its provider call, which no fence covers
        (see test_a_worker_paused_before_its_provider_call_sends_nothing_after_a_takeover).
        """
        target = target or self._pick()
        if target is None:
            return None
        os.kill(target.pid, signal.SIGSTOP)
        try:
            spared = sending_run_ids(target.owners) if self.spare_unfenced_sends else []
            expired = expire_leases(target.owners, sparing=spared)
            taken = False
            if expired:
                runs = [run_id for run_id, _ in expired]
                deadline = time.monotonic() + takeover_s
                while time.monotonic() < deadline and not taken:
                    now = lease_epochs(runs)
                    taken = any(now[run_id] > epoch for run_id, epoch in expired)
                    if not taken:
                        self._tick.wait(POLL_S)
        finally:
            os.kill(target.pid, signal.SIGCONT)
        self.tally.paused += 1
        self.tally.zombies += int(taken)
        self.tally.events.append(f"pause w{target.index} pid={target.pid} leases={expired} spared={spared} "
                                 f"taken_over={taken}")
        return target

    def stop_all(self) -> None:
        """Kill what is left (SIGCONT first, in case a worker is paused) and reap every child."""
        for item in list(self.workers):
            if item.process.is_alive():
                os.kill(item.pid, signal.SIGCONT)
                os.kill(item.pid, signal.SIGKILL)
            item.process.join(timeout=5)
        self._count_exits(self.workers)
        self.workers = []

    def _pick(self) -> Worker | None:
        # Armed workers are left to reach their fault point: that crash is theirs to inject.
        alive = [w for w in self.workers if w.process.is_alive() and w.fault is None]
        if not alive:
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT lease_owner FROM runs_run WHERE lease_owner IS NOT NULL"
                           " AND lease_expires_at > statement_timestamp()")
            holding = {row[0] for row in cursor.fetchall()}
        busy = [w for w in alive if holding.intersection(w.owners)]
        return self.rng.choice(busy or alive)

    def _replace_dead(self) -> None:
        dead = [w for w in self.workers if not w.process.is_alive()]
        for item in dead:
            item.process.join(timeout=5)
            self.workers.remove(item)
        self._count_exits(dead)
        for item in dead:
            # A fault exit leaves leases behind, like a kill: expire them rather than wait.
            self.tally.events.append(f"exit w{item.index} pid={item.pid} code={item.process.exitcode} "
                                     f"leases={expire_leases(item.owners)}")
        while len(self.workers) < self.size and self.tally.spawned < self.max_spawns \
                and time.monotonic() < self.until:
            armed = self.rng.random() < self.fault_rate
            self._spawn(fault=self.rng.choice(self.fault_points) if armed else None)

    def _count_exits(self, exited: list[Worker]) -> None:
        for item in exited:
            code = item.process.exitcode
            if code == faults.KILLED_EXIT_CODE:
                self.tally.fault_exits += 1
            elif code not in (0, -signal.SIGKILL):
                self.tally.other_exits.append(code)

    def _spawn(self, *, fault: str | None) -> None:
        index = self.tally.spawned
        self.workers.append(spawn(index, fault=fault, until=self.until, log_dir=self.log_dir))
        self.tally.spawned += 1
        self.tally.events.append(f"spawn w{index} pid={self.workers[-1].pid} fault={fault}")


# --- Settling -------------------------------------------------------------------------------------------------------


def settle(*, seconds: float = 20.0) -> int:
    """With every worker gone, drive all runs to rest in this process; returns the rounds it took.

    Each round expires leftover leases, reaps episodes left running and advances
    every due run. The ladder's own clock decides when a follow-up is due (the
    policy keeps it in the run's state), so rounds wait for it, up to `seconds`.
    Returns when no real run has an episode queued or running; raises otherwise.
    """
    deadline = time.monotonic() + seconds
    tick = threading.Event()
    rounds = 0
    while time.monotonic() < deadline:
        rounds += 1
        expire_leases()
        dispatch.reap_expired()
        due = due_run_ids()
        for run_id in due:
            worker.advance_run(run_id, owner="settler")
        if not due:
            if not unsettled_run_ids():
                return rounds
            tick.wait(0.1)
    raise AssertionError(f"the runs did not settle in {seconds} s; still busy: {unsettled_run_ids()}")


def unsettled_run_ids() -> list[int]:
    """Real runs with an episode queued (due or not) or running."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT e.run_id FROM runs_episode e JOIN runs_run r ON r.id = e.run_id"
                       " WHERE NOT r.sim AND e.status IN ('queued', 'running') ORDER BY 1")
        return [row[0] for row in cursor.fetchall()]
