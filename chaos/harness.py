"""One chaos run: world, workers, faults, settle, invariants. `run(options)` returns the process exit code.

Phases, each bounded in time:
1. start the runs a few at a time over the first part of the chaos phase, while
   the planned faults fire (chaos.schedule) and a progress line prints;
2. settle: close every fault, keep the worker commands up, and wait until no
   real run has an episode queued or running; slow is fine, stuck (no episode
   finished for `settle_s` while some are due) is reported as a wedge;
3. stop the workers, check the invariants (chaos.invariants), print the table.

The worker command dispatches due episodes itself when it is `runworkers`;
bare `qcluster` only fires its every-minute schedule, so then the harness reaps
and dispatches every two seconds, as runworkers would (`--dispatch`). Every
two seconds it also looks for a worker command that starts no task while
episodes are due (a frozen cluster), which fails an invariant.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import DatabaseError, connections

from chaos import invariants, observe, report, scenario, schedule
from chaos.cluster import WorkerCommand
from chaos.database import PrivateDatabase
from chaos.injector import BUSY_WORKER_KINDS, Injector
from chaos.provider import ChaosTwilio

TICK_S = 0.2
DISPATCH_EVERY_S = 2.0
QUEUE_LOW = 20  # the harness's stand-in dispatcher enqueues only below this many queued tasks


@dataclass
class Options:
    runs: int
    chaos_s: float
    ramp_s: float
    settle_s: float
    settle_max_s: float
    stall_s: float
    seed: int
    kinds: tuple[str, ...]
    commands: int
    worker_argv: list[str]
    worker_env: dict[str, str]
    harness_dispatch: bool
    db_restarts: int
    workdir: Path
    progress_every_s: float = 5.0
    agent_path: Path = scenario.AGENT_PATH
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "chaos.log"


def run(options: Options, *, database: PrivateDatabase) -> int:
    rng = random.Random(options.seed)
    started_at = time.monotonic()
    log = _Log(options.log_path, started_at=started_at)
    twilio = ChaosTwilio().start()
    markers = options.workdir / "fault-markers"
    commands = [WorkerCommand(index, argv=options.worker_argv, env=options.worker_env, log_dir=options.workdir)
                for index in range(options.commands)]
    injector = Injector(rng=rng, commands=commands, database=database, twilio=twilio, markers=markers, log=log)
    try:
        deployments = scenario.prepare(twilio, agent_path=options.agent_path)
        if "lookup-fail" in options.kinds:
            # A quarter of the recipients can never be looked up: their unknown outcomes go to a human.
            twilio.lookups_down_for = {scenario.phone_of(index) for index in range(options.runs) if index % 4 == 3}
        for command in commands:
            command.launch()
        plan = schedule.plan(rng, seconds=options.chaos_s, kinds=options.kinds, db_restarts=options.db_restarts)
        log(f"plan: {len(plan)} faults over {options.chaos_s:.0f} s, seed {options.seed}")
        _chaos_phase(options, rng=rng, plan=plan, injector=injector, deployments=deployments, log=log)
        injector.end_all()
        settled, waited = _settle(options, injector=injector, log=log)
        for command in commands:
            command.stop()
        checks = _check(twilio, settle_s=waited, settled=settled, options=options, injector=injector)
        totals = _retry(observe.progress)
        print(report.table(checks=checks, injected=injector.injected, notes=injector.notes, totals=totals,
                           commands=commands, seconds=time.monotonic() - started_at, seed=options.seed))
        return 0 if all(check.held for check in checks) else 1
    finally:
        for command in commands:
            command.stop(grace_s=1.0)
        twilio.come_up()
        twilio.stop()


def _chaos_phase(options: Options, *, rng: random.Random, plan: list[schedule.Fault], injector: Injector,
                 deployments: list, log) -> None:
    begin = time.monotonic()
    tick = threading.Event()
    started, pending = 0, list(plan)
    next_dispatch = next_progress = begin
    while True:
        now = time.monotonic()
        elapsed = now - begin
        pending = schedule.still_due(pending, elapsed=elapsed, seconds=options.chaos_s, injected=injector.injected)
        if elapsed >= options.chaos_s and started >= options.runs and not pending:
            break
        injector.finish_due(now=now)
        while pending and pending[0].at <= elapsed:
            fault = pending.pop(0)
            if not injector.inject(fault):
                # Not possible now (no busy worker yet, the database is down): retry a little later.
                delay = TICK_S if fault.kind in BUSY_WORKER_KINDS else rng.uniform(0.5, 1.5)
                pending.append(schedule.Fault(at=elapsed + delay, kind=fault.kind, hold_s=fault.hold_s,
                                              mode=fault.mode))
                pending.sort(key=lambda item: item.at)
                break
        if not injector.db_down:
            target = min(options.runs, int(options.runs * min(1.0, (elapsed + TICK_S) / options.ramp_s)) + 1)
            started = _start_runs(deployments, started=started, target=target)
        if now >= next_dispatch:
            _watch(options, injector=injector, log=log)
            next_dispatch = now + DISPATCH_EVERY_S
        if now >= next_progress:
            owed = sorted({fault.kind for fault in pending}) if elapsed >= options.chaos_s else []
            overtime = f" (overtime: {', '.join(owed)} never injected)" if owed else ""
            _progress(log, phase=f"chaos {elapsed:4.0f}/{options.chaos_s:.0f}s{overtime}", injector=injector)
            next_progress = now + options.progress_every_s
        tick.wait(TICK_S)


def _settle(options: Options, *, injector: Injector, log) -> tuple[bool, float]:
    """Wait until no real run has an episode queued or running; (settled, seconds without progress).

    Slow is not stuck: the wait ends early only after `settle_s` seconds in
    which no episode finished while some were due (a wedge), or after
    `settle_max_s` in all.
    """
    begin = last_change = time.monotonic()
    tick = threading.Event()
    next_dispatch = next_progress = begin
    finished = -1
    while (now := time.monotonic()) - last_change < options.settle_s and now - begin < options.settle_max_s:
        injector.finish_due()
        progress = _guarded(observe.progress)
        if progress is not None and progress.unsettled == 0:
            log(f"settled after {now - begin:.0f} s")
            return True, 0.0
        if progress is not None and progress.episodes_finished != finished:
            finished, last_change = progress.episodes_finished, now
        if now >= next_dispatch:
            _watch(options, injector=injector, log=log)
            next_dispatch = now + DISPATCH_EVERY_S
        if now >= next_progress:
            _progress(log, phase=f"settle {now - begin:4.0f}s", injector=injector)
            next_progress = now + options.progress_every_s
        tick.wait(TICK_S * 2)
    stalled = time.monotonic() - last_change
    log(f"not settled: no episode finished for {stalled:.0f} s")
    return False, stalled


def _check(twilio: ChaosTwilio, *, settle_s: float, settled: bool, options: Options,
           injector: Injector) -> list[invariants.Check]:
    checks = _retry(lambda: invariants.check_all(twilio, settle_s=settle_s, settled=settled))
    stalls = {command.index: command.stalls for command in injector.commands if command.stalls}
    checks.append(invariants.Check(
        "no worker command stalled while episodes were due", not stalls,
        f"none for {options.stall_s:.0f} s" if not stalls else ", ".join(
            f"command {index}: {count} stall(s) of {options.stall_s:.0f} s" for index, count in stalls.items())))
    missing = [kind for kind in options.kinds if not injector.injected[kind]]
    checks.append(invariants.Check("every enabled fault kind injected", not missing,
                                   "yes" if not missing else f"never injected: {', '.join(missing)}"))
    return checks


def _start_runs(deployments: list, *, started: int, target: int) -> int:
    while started < target:
        deployment = deployments[started % len(deployments)]
        if _guarded(lambda d=deployment, i=started: scenario.start(d, index=i)) is None:
            break  # the database went away; the next tick starts it
        started += 1
    return started


def _watch(options: Options, *, injector: Injector, log) -> None:
    """Every two seconds: dispatch (when the harness stands in for runworkers) and look for stalled commands."""
    if injector.db_down:
        for command in injector.commands:
            command.excuse_stall()  # nothing can run without the database
        return
    if options.harness_dispatch:
        _guarded(_dispatch)
    progress = _guarded(observe.progress)
    if progress is None:
        return
    for command in injector.commands:
        if command.check_stall(work_waiting=progress.due > 0, after_s=options.stall_s):
            log(f"worker command {command.index}: no task started for {options.stall_s:.0f} s while "
                f"{progress.due} episodes were due (a frozen cluster?)", echo=True)


def _dispatch() -> None:
    """Reap, then enqueue due runs unless the queue is still backed up: runs.dispatch would re-enqueue the
    same runs every tick while the workers catch up (issue 9 item 3; runworkers does not need this)."""
    from runs import dispatch

    dispatch.reap_expired()
    if observe.queued_tasks() < QUEUE_LOW:
        dispatch.dispatch_due()


def _guarded(call):
    """Call it; on a database error (a restart in progress) drop the connection and return None."""
    try:
        return call()
    except DatabaseError:
        connections.close_all()
        return None


def _retry(call, *, seconds: float = 60.0):
    """Call it until the database answers (it may still be recovering from an immediate stop)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except DatabaseError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            threading.Event().wait(0.5)


def _progress(log, *, phase: str, injector: Injector) -> None:
    progress = None if injector.db_down else _guarded(observe.progress)
    faults = " ".join(f"{kind}:{count}" for kind, count in sorted(injector.injected.items())) or "none yet"
    state = progress.line() if progress else "database down"
    log(f"{phase} · {state} · faults {faults}", echo=True)


class _Log:
    """Appends to chaos.log; progress lines also go to stdout, one per line."""

    def __init__(self, path: Path, *, started_at: float) -> None:
        self.path = path
        self.started_at = started_at

    def __call__(self, text: str, *, echo: bool = False) -> None:
        line = f"[{time.monotonic() - self.started_at:6.1f}s] {text}"
        with self.path.open("a") as out:
            out.write(line + "\n")
        if echo:
            print(line, file=sys.stdout, flush=True)
