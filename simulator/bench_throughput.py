"""The throughput figures of `manage.py bench`: start episodes of real runs through the runtime in N forked
processes against the raw-SQL episode cycle (simulator.bench_cycle) in as many, and the CPU one episode takes on
either side (simulator.bench_cpu).

The runs' organization is a sandbox: their sends are stored, not delivered. Each run has a contact of its own
(caps count a real run's sends per recipient across the organization), in a time zone where it is the middle of the
day now (bench_burst.working_zone; the agent's business days are every day: an episode outside them would only be
deferred).
"""

from __future__ import annotations

import itertools
import multiprocessing
import statistics
import time
from dataclasses import dataclass

from django.db import connection, connections
from django.utils import timezone
from django_q.models import OrmQ

from agents.models import AgentVersion, Organization
from runs import starts, worker
from simulator import bench_burst, bench_cpu, bench_cycle, bench_history, bench_sql

# The runtime and the raw cycle take turns (raw, runtime, raw, ... raw): each runtime round is held against the
# raw windows on either side of it, and every round weighs the same, so a drift of the machine's speed within the
# minute (README, "Benchmarks") weighs on both sides of the ratio alike.
ROUNDS = 3
RAW_WINDOW_S = 1.0
# Episodes each runtime process runs untimed first, on runs of its own: a worker keeps its connection for thousands
# of episodes, so its first ones (each hot statement prepared, then planned anew for its first five executions
# before PostgreSQL settles on a generic plan) are not the throughput it sustains. The raw cycle's statements are
# too small for that to show.
WARMUP_EPISODES = 10


@dataclass(frozen=True)
class Measured:
    episodes: int  # the runtime's timed ones
    runtime_rate: float  # episodes per second
    raw_rate: float
    runtime_cpu: bench_cpu.Spent  # CPU seconds per episode, each side
    raw_cpu: bench_cpu.Spent


def measure(version: AgentVersion, organization: Organization, *, processes: int, runs: int, contact: dict,
            inputs: dict) -> Measured:
    """`runs` start episodes per process through the runtime, in ROUNDS rounds between raw windows."""
    zone = bench_burst.working_zone(timezone.now())
    run_ids = [
        starts.start_run(organization, version=version, goal="bench", inputs=inputs,
                         contacts=[{**contact, "email": f"vendor{index}@bench.example",
                                    "phone": f"+1555{index:07d}", "slack_user": f"UBENCH{index}",
                                    "timezone": zone}]).pk
        for index in range((runs + WARMUP_EPISODES * ROUNDS) * processes + 1)
    ]
    # These runs are advanced here, not by workers: drop the tasks their starts queued (the throwaway database's
    # queue holds nothing else yet), or the burst's workers would find them later.
    OrmQ.objects.all().delete()
    bench_sql.analyze()
    worker.advance_run(run_ids.pop(), owner="bench")  # untimed: imports and first-use caches
    bench_cycle.create_schema()
    warmups = [run_ids[index * WARMUP_EPISODES:(index + 1) * WARMUP_EPISODES]
               for index in range(processes * ROUNDS)]
    run_ids = run_ids[processes * ROUNDS * WARMUP_EPISODES:]
    slices = [run_ids[index::processes] for index in range(processes)]
    raw = [bench_cycle.throughput(processes, seconds=RAW_WINDOW_S)]
    runtime = []
    for turn in range(ROUNDS):
        runtime.append(_advance_in_processes([runs_of[turn::ROUNDS] for runs_of in slices],
                                             warmups=warmups[turn * processes:(turn + 1) * processes]))
        raw.append(bench_cycle.throughput(processes, seconds=RAW_WINDOW_S))
    return Measured(
        episodes=sum(ran for ran, _, _ in runtime),
        runtime_rate=statistics.mean(ran / seconds for ran, seconds, _ in runtime),
        raw_rate=statistics.mean((before[0] + after[0]) / 2 for before, after in itertools.pairwise(raw)),
        runtime_cpu=_per_episode([(ran, spent) for ran, _, spent in runtime]),
        raw_cpu=_per_episode([(episodes, spent) for _, episodes, spent in raw]),
    )


def seed_history(version: AgentVersion, organization: Organization, *, contact: dict, inputs: dict,
                 runs: int = bench_history.RUNS) -> int:
    """A real run's start episode, copied as the database's finished runs (simulator.bench_history) so that the
    part's statements are planned as on a database that has worked for a while. Returns the outbox rows written."""
    contact = {**contact, "email": "history@bench.example", "phone": "+15560000000", "slack_user": "UHISTORY",
               "timezone": bench_burst.working_zone(timezone.now())}
    template = starts.start_run(organization, version=version, goal="bench history", inputs=inputs, contacts=[contact])
    worker.advance_run(template.pk, owner="bench")
    return bench_history.seed(template.pk, count=runs)


def _per_episode(measured: list[tuple[int, bench_cpu.Spent]]) -> bench_cpu.Spent:
    """CPU seconds per episode over (episodes, CPU spent) measurements."""
    episodes = sum(count for count, _ in measured) or 1
    spent = sum((cpu for _, cpu in measured), bench_cpu.NOTHING)
    return bench_cpu.Spent(worker=spent.worker / episodes,
                           backend=None if spent.backend is None else spent.backend / episodes)


def _advance_in_processes(slices: list[list[int]], *, warmups: list[list[int]]) -> tuple[int, float, bench_cpu.Spent]:
    """Run `advance_run` over each slice of run ids in its own forked process, after that process's `warmups`
    (untimed; the timed parts start together): (episodes run, slowest wall, the CPU the processes and their
    backends took)."""
    connections.close_all()  # each child opens its own connection
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    warmed_up = context.Barrier(len(slices))

    def advance(run_ids: list[int], warmup: list[int]) -> None:
        for run_id in warmup:
            worker.advance_run(run_id, owner="bench")
        connection.ensure_connection()
        warmed_up.wait()  # the slowest process's wall is the round's only if every timed part starts together
        meter = bench_cpu.Meter(connection.connection.info)
        started = time.perf_counter()
        ran = sum(worker.advance_run(run_id, owner="bench") for run_id in run_ids)
        results.put((ran, time.perf_counter() - started, meter.spent()))
        connections.close_all()

    children = [context.Process(target=advance, args=(run_ids, warmup))
                for run_ids, warmup in zip(slices, warmups, strict=True)]
    for child in children:
        child.start()
    done = [results.get() for _ in children]
    for child in children:
        child.join()
    return (sum(ran for ran, _, _ in done), max(wall for _, wall, _ in done),
            sum((spent for _, _, spent in done), bench_cpu.NOTHING))
