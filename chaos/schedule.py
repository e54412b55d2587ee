"""Which faults the chaos run injects, and when: a seeded timeline, so a seed replays the same plan.

Kinds (`--faults`, comma separated):

- kill-idle: SIGKILL a django-q2 worker that holds no lease (the one that can wedge a bare qcluster);
- kill-busy: SIGKILL a worker that holds a lease, in the middle of an episode;
- stop: SIGSTOP a busy worker, expire its leases, let another worker take the runs over, SIGCONT it;
- cluster-kill: SIGKILL a whole worker command (every process group under it), relaunched after a second;
- crash: arm a crash at a fault point around the provider call (runs.faults, `:once` markers);
- lookup-fail: the fake's lookup fails for a quarter of the recipients, and for everyone during windows;
- outage: the fake refuses connections for a window;
- db-restart: stop the private PostgreSQL (fast or immediate), keep it down a moment, start it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

# While an enabled kind was never injected, the chaos phase may last up to OVERTIME times its length.
OVERTIME = 2.0
KINDS = ("kill-idle", "kill-busy", "stop", "cluster-kill", "crash", "lookup-fail", "outage", "db-restart")


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the chaos phase began
    kind: str
    hold_s: float = 0.0  # how long a window or pause lasts
    mode: str = ""  # db-restart: the stop mode


def parse_kinds(text: str) -> tuple[str, ...]:
    """`all`, or a comma-separated subset of KINDS; raises ValueError naming an unknown kind."""
    if text.strip() in ("all", ""):
        return KINDS
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    return kinds


def plan(rng: random.Random, *, seconds: float, kinds: tuple[str, ...], db_restarts: int = 2) -> list[Fault]:
    """The timeline for a chaos phase of `seconds`; every enabled kind appears at least once."""
    faults: list[Fault] = []

    def spread(kind: str, count: int, **fields) -> None:
        for _ in range(count):
            faults.append(Fault(at=rng.uniform(0.08, 0.9) * seconds, kind=kind, **fields))

    if "kill-idle" in kinds:
        spread("kill-idle", max(2, int(seconds / 12)))
    if "kill-busy" in kinds:
        spread("kill-busy", max(2, int(seconds / 12)))
    if "stop" in kinds:
        for _ in range(max(2, int(seconds / 15))):
            faults.append(Fault(at=rng.uniform(0.08, 0.9) * seconds, kind="stop", hold_s=rng.uniform(1.0, 3.0)))
    if "cluster-kill" in kinds:
        spread("cluster-kill", max(1, int(seconds / 60)))
    if "crash" in kinds:
        spread("crash", max(3, int(seconds / 8)))
    if "lookup-fail" in kinds:
        for _ in range(max(1, int(seconds / 40))):
            faults.append(Fault(at=rng.uniform(0.1, 0.8) * seconds, kind="lookup-fail",
                                hold_s=rng.uniform(3.0, 6.0)))
    if "outage" in kinds:
        for _ in range(max(1, int(seconds / 90))):
            faults.append(Fault(at=rng.uniform(0.15, 0.75) * seconds, kind="outage", hold_s=rng.uniform(4.0, 8.0)))
    if "db-restart" in kinds:
        for number in range(db_restarts):
            # Evenly spaced, so restarts never overlap: fast and immediate (a crash) in turn.
            at = seconds * (number + 1) / (db_restarts + 1) + rng.uniform(-0.05, 0.05) * seconds
            faults.append(Fault(at=at, kind="db-restart", hold_s=rng.uniform(1.0, 3.0),
                                mode=("fast", "immediate")[number % 2]))
    return sorted(faults, key=lambda fault: fault.at)


def still_due(faults: list[Fault], *, elapsed: float, seconds: float, injected: Counter) -> list[Fault]:
    """Those of `faults` (planned, or retried after finding nothing to act on) still to be injected `elapsed` seconds
    into a chaos phase of `seconds`: within the phase, all of them; past it, only those of a kind never injected
    (no busy worker yet on a loaded machine, say), until the phase has lasted OVERTIME times its length, so that
    every enabled kind is injected at least once."""
    if elapsed < seconds:
        return faults
    if elapsed >= seconds * OVERTIME:
        return []
    return [fault for fault in faults if not injected[fault.kind]]
