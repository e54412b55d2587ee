"""`manage.py bench`: the runtime's performance figures, each as a ratio against a baseline measured in the same run.

1. Six-week simulated cases: every golden case of each template (scripted model), median and max wall time
   per template against the 0.1 s target.
2. Episode throughput of the runtime (worker.advance_run on start episodes: scripted model, sandbox sends) in
   1 and 2 forked processes, against the raw-SQL episode cycle (simulator.bench_cycle: the reference
   psycopg 3 cycle) run with the same number of processes, the two in turn (target: at least half).
3. Queries per episode of each kind (start, follow-up, inbound), against the target of 12.
4. The 09:00 burst (simulator.bench_burst): thousands of sleeping runs due at once, drained by two worker
   processes; episodes per second and due-lag p50 / p95 / max.
5. Due-lag of follow-ups due a few seconds ahead, dispatched by the supervisor's tick (simulator.bench_lag).
6. The dispatcher's due-runs query with 100 sleeping runs against N sleeping runs (target: under 2x apart).

Everything happens in a throwaway database (`lucia_bench`) created and dropped on the same server, so the
figures never touch development data and a run leaves nothing behind. Timings are medians or totals of
wall time; they are benchmarks to read, never assertions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from agents import versions
from agents.config import source as yaml_source
from agents.config.schema_base import WEEKDAYS
from agents.models import AgentVersion, Organization
from runs import dispatch, events, queue, starts, submissions, worker
from runs.models import Episode, EpisodeKind, EpisodeStatus, Run
from simulator import (
    bench_burst,
    bench_cpu,
    bench_history,
    bench_lag,
    bench_sql,
    bench_throughput,
    engine,
    gate,
    scorecards,
    sim_org,
)

# Two benches on one server (CI and a developer, say) each need their own throwaway database.
BENCH_DATABASE = os.environ.get("LUCIA_BENCH_DATABASE", "lucia_bench")
SIM_TARGET_S = 0.1
THROUGHPUT_TARGET = 0.5
QUERIES_TARGET = 12
DISPATCH_TARGET = 2.0
DUE_LAG_TARGET_S = 5.0
DUE_LAG_RUNS = 40


@dataclass(frozen=True)
class Figure:
    """One line of the table; a figure that is only reported (no target) has ratio and ok None."""

    name: str
    measured: str
    baseline: str
    ratio: float | None
    target: str
    ok: bool | None


@contextlib.contextmanager
def throwaway_database(name: str = BENCH_DATABASE) -> Iterator[None]:
    """Create `name` on the default server, migrate it, point the default connection at it; drop it after.

    Django's test-database machinery does exactly this switch (and clobbers a leftover from a crashed run).
    """
    default = connections["default"]
    old_name, old_test = default.settings_dict["NAME"], dict(default.settings_dict.get("TEST") or {})
    default.settings_dict["TEST"] = {**old_test, "NAME": name}
    default.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        default.creation.destroy_test_db(old_name, verbosity=0)
        default.settings_dict["TEST"] = old_test


PARTS = ("sims", "throughput", "queries", "burst", "lag", "dispatch")


def run(*, sleeping: int = 100_000, runs: int = 200, burst: int = 10_000, parts: tuple[str, ...] = PARTS,
        say: Callable[[str], None] = print) -> list[Figure]:
    """The benchmarks named in `parts` (all by default) in a throwaway database; `say` reports progress."""
    # Query logging (DEBUG) would grow memory and slow every query: measure what production runs. django-q2 logs
    # every enqueue (thousands of real runs start here): the table is the output.
    with override_settings(DEBUG=False), throwaway_database(), _quiet("django-q"):
        organization = _bench_organization()
        templates = load_templates(organization)
        say(f"templates: {', '.join(v.agent.slug for v in templates)}; database {connection.settings_dict['NAME']}")
        figures = simulations(templates, say=say) if "sims" in parts else []
        # Real runs (the throughput, the burst, the due-lag) need a deployment, one that sends on any day.
        primary = _every_day(_published(templates[0], organization), organization)
        if "throughput" in parts:
            started = time.perf_counter()
            sent = bench_throughput.seed_history(primary, organization, contact=_contact(primary),
                                                 inputs=_inputs(primary))
            say(f"  history: {bench_history.RUNS:,} finished runs, {sent:,} sent messages "
                f"({time.perf_counter() - started:.1f}s)")
            for processes in (1, 2):
                figures.extend(throughput(primary, organization, processes=processes, runs=runs, say=say))
        if "queries" in parts:
            figures.extend(queries_per_kind(primary, say=say))
            figures.append(queries_real_start(primary, organization, say=say))
        if "burst" in parts:
            figures.extend(burst_figures(primary, organization, runs=burst, say=say))
        if "lag" in parts:
            figures.append(due_lag(primary, organization, say=say))
        if "dispatch" in parts:
            figures.append(dispatcher(primary, sleeping=sleeping, say=say))
    return figures


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger `name` at WARNING for the duration."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_templates(organization: Organization) -> list[AgentVersion]:
    """Each template as a draft of the bench organization's own agent."""
    drafts = []
    for path in sorted((Path(settings.BASE_DIR) / "fixtures" / "agents").glob("*.yaml")):
        source = path.read_text()
        agent = versions.create_agent(organization, slug=path.stem, name=path.stem)
        drafts.append(versions.create_draft(agent, source=source))
    return [draft for draft in drafts if draft.is_valid]


def simulations(templates: list[AgentVersion], *, say: Callable[[str], None]) -> list[Figure]:
    """Every golden case of each template for six weeks (the better of two runs each), after an untimed warm-up."""
    organization = sim_org.organization_for(None)
    engine.run_case(templates[0], templates[0].compiled["evals"][0], organization=organization, weeks=6)
    figures = []
    for version in templates:
        timings = {}
        for case in version.compiled["evals"]:
            # The better of two runs: a load spike elsewhere on the machine is not the simulator's time.
            timings[case["name"]] = min(_timed(engine.run_case, version, case, organization=organization, weeks=6)
                                        for _ in range(2))
        slowest = max(timings, key=timings.get)
        median, seconds = statistics.median(timings.values()), timings[slowest]
        say(f"  {version.agent.slug}: {len(timings)} cases, median {median:.3f}s, slowest {slowest} {seconds:.3f}s")
        figures.append(Figure(
            f"6-week sim case, {version.agent.slug} ({len(timings)} cases)",
            f"median {median:.3f} s, max {seconds:.3f} s", f"{SIM_TARGET_S} s target", seconds / SIM_TARGET_S,
            "<= 1.00", seconds <= SIM_TARGET_S,
        ))
    return figures


def throughput(version: AgentVersion, organization: Organization, *, processes: int, runs: int,
               say: Callable[[str], None]) -> list[Figure]:
    """Start episodes of real runs through the runtime in `processes` forked processes vs the raw cycle in as many
    (simulator.bench_throughput): the rates, and the CPU per episode of each side."""
    measured = bench_throughput.measure(version, organization, processes=processes, runs=runs,
                                        contact=_contact(version), inputs=_inputs(version))
    say(f"  {processes} process(es): runtime {measured.episodes} episodes, {measured.runtime_rate:.0f} ep/s; raw SQL "
        f"{measured.raw_rate:.0f} ep/s ({bench_throughput.ROUNDS} runtime rounds, each between two raw windows)")
    ratio = measured.runtime_rate / measured.raw_rate
    return [
        Figure(f"episode throughput, {processes} process(es), runtime vs raw SQL", f"{measured.runtime_rate:.0f} ep/s",
               f"{measured.raw_rate:.0f} ep/s raw", ratio, f">= {THROUGHPUT_TARGET:.2f}", ratio >= THROUGHPUT_TARGET),
        _cpu_figure(processes, runtime=measured.runtime_cpu, raw=measured.raw_cpu),
    ]


def _cpu_figure(processes: int, *, runtime: bench_cpu.Spent, raw: bench_cpu.Spent) -> Figure:
    """CPU per episode, runtime vs raw cycle (ratio: raw / runtime). Only reported: where the throughput goes. The
    machine's cores over the runtime's CPU per episode bound its throughput (bench_cpu), whatever the processes."""
    def shown(spent: bench_cpu.Spent) -> str:
        if spent.backend is None:
            return f"{spent.worker * 1000:.2f} ms (worker; PostgreSQL's not on this machine)"
        return (f"{(spent.worker + spent.backend) * 1000:.2f} ms ({spent.worker * 1000:.2f} worker + "
                f"{spent.backend * 1000:.2f} PostgreSQL)")

    both = runtime.backend is not None and raw.backend is not None
    spent = (runtime.worker + runtime.backend) if both else runtime.worker
    ratio = (((raw.worker + raw.backend) if both else raw.worker) / spent) if spent else None
    return Figure(f"episode CPU, {processes} process(es), runtime vs raw SQL", shown(runtime),
                  f"{shown(raw)} raw", ratio, "reported", None)


def queries_per_kind(version: AgentVersion, *, say: Callable[[str], None]) -> list[Figure]:
    """Queries of one advance_run that runs exactly one episode: a start, the first follow-up, an inbound reply."""
    organization = sim_org.organization_for(None)
    contact = _contact(version)
    run = starts.start_run(organization, version=version, goal="bench queries", contacts=[contact],
                           inputs=_inputs(version), sim=True, virtual_now=_weekday_morning())

    def start() -> None:
        pass

    def followup() -> None:
        Run.objects.filter(pk=run.pk).update(virtual_now=events.earliest_due(run.pk))

    def inbound() -> None:
        submissions.record(Run.objects.get(pk=run.pk), kind=EpisodeKind.INBOUND, dedupe_key="bench:inbound",
                           sender=contact["email"], channel="email", text="Thanks, I am on it this week.",
                           files=[], extra={"subject": "Re: bench"}, strict=False)

    figures = []
    for kind, prepare in [(EpisodeKind.START, start), (EpisodeKind.FOLLOWUP, followup),
                          (EpisodeKind.INBOUND, inbound)]:
        prepare()
        before = set(Episode.objects.filter(run_id=run.pk, status=EpisodeStatus.DONE).values_list("pk", flat=True))
        with CaptureQueriesContext(connection) as queries:
            worker.advance_run(run.pk, owner="bench")
        ran = list(Episode.objects.filter(run_id=run.pk, status=EpisodeStatus.DONE).exclude(pk__in=before)
                   .values_list("kind", flat=True))
        if ran != [kind]:
            say(f"  {kind}: expected one {kind} episode, ran {ran or 'none'}")
        count = len(queries)
        say(f"  {kind} episode: {count} queries")
        figures.append(Figure(f"queries per {kind} episode", f"{count}", f"{QUERIES_TARGET} target",
                              count / QUERIES_TARGET, "<= 1.00", ran == [kind] and count <= QUERIES_TARGET))
    return figures


def queries_real_start(version: AgentVersion, organization: Organization, *, say: Callable[[str], None]) -> Figure:
    """Queries of a real run's start episode (`organization` a sandbox): its send is counted against the
    per-contact caps of every real run of the organization, under the address's lock."""
    contact = {**_contact(version), "timezone": bench_burst.working_zone(timezone.now())}
    run = starts.start_run(organization, version=version, goal="bench queries", contacts=[contact],
                           inputs=_inputs(version))
    with CaptureQueriesContext(connection) as queries:
        worker.advance_run(run.pk, owner="bench")
    ran = list(Episode.objects.filter(run_id=run.pk, status=EpisodeStatus.DONE).values_list("kind", flat=True))
    count = len(queries)
    say(f"  start episode of a real run: {count} queries")
    return Figure("queries per start episode, real run under caps", f"{count}", f"{QUERIES_TARGET} target",
                  count / QUERIES_TARGET, "<= 1.00", ran == [EpisodeKind.START] and count <= QUERIES_TARGET)


def burst_figures(version: AgentVersion, organization: Organization, *, runs: int,
                  say: Callable[[str], None]) -> list[Figure]:
    """The 09:00 burst: `runs` sleeping runs due at once, drained by runworkers with two worker processes."""
    burst = bench_burst.measure(version, organization, runs=runs, contact=_contact(version),
                                inputs=_inputs(version), say=say)
    say(f"  burst: {burst.done:,} done, {burst.failed:,} failed of {burst.runs:,}")
    return [
        Figure(f"09:00 burst, {runs:,} runs due at once, 2 workers", f"{burst.episodes_per_s:.1f} ep/s",
               f"{burst.done:,} of {runs:,} done", None, "all drained", burst.done == runs),
        Figure("09:00 burst due-lag", f"p50 {burst.p50_s:.1f} s, p95 {burst.p95_s:.1f} s, max {burst.max_s:.1f} s",
               "-", None, "reported", None),
    ]


def due_lag(version: AgentVersion, organization: Organization, *, say: Callable[[str], None]) -> Figure:
    """p50/p95 of how late a short follow-up starts under a 2 s dispatch tick (one in-process worker)."""
    lag = bench_lag.measure(version, organization, runs=DUE_LAG_RUNS, contact=_contact(version),
                            inputs=_inputs(version), say=say)
    return Figure(f"due-lag of {bench_lag.DELAY_S:.0f} s follow-ups, tick {bench_lag.TICK_S:.0f} s",
                  f"p95 {lag.p95_s:.2f} s (p50 {lag.p50_s:.2f} s)", f"{DUE_LAG_TARGET_S:.0f} s target",
                  lag.p95_s / DUE_LAG_TARGET_S, "< 1.00", lag.p95_s < DUE_LAG_TARGET_S)


def dispatcher(version: AgentVersion, *, sleeping: int, say: Callable[[str], None]) -> Figure:
    """runs.dispatch's due-runs query with 100 sleeping runs, then with `sleeping` (same 50 due runs both times)."""
    organization = Organization.objects.create(slug="bench-dispatch", name="Bench dispatch")
    ids = {"organization_id": organization.pk, "version_id": version.pk}
    bench_sql.insert_dispatch_runs(**ids, count=50, due=True)
    bench_sql.insert_dispatch_runs(**ids, count=100, due=False)
    small = _query_ms()
    started = time.perf_counter()
    bench_sql.insert_dispatch_runs(**ids, count=max(0, sleeping - 100), due=False,
                                   progress=lambda done: say(f"  sleeping runs: {100 + done:,}/{sleeping:,}"))
    say(f"  inserted {sleeping:,} sleeping runs in {time.perf_counter() - started:.1f}s")
    large = _query_ms()
    ratio = large / small
    return Figure(f"dispatch query, {sleeping:,} vs 100 sleeping", f"{large:.2f} ms", f"{small:.2f} ms @100",
                  ratio, f"< {DISPATCH_TARGET:.2f}", ratio < DISPATCH_TARGET)


def table(figures: list[Figure]) -> list[str]:
    header = ("figure", "measured", "baseline (same run)", "ratio", "target", "")
    rows = [(f.name, f.measured, f.baseline, "-" if f.ratio is None else f"{f.ratio:.2f}", f.target,
             {True: "ok", False: "MISS", None: ""}[f.ok]) for f in figures]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths).rstrip())
    return lines


def _query_ms(*, repeat: int = 30, warmup: int = 5) -> float:
    """The fastest of `repeat` executions: the least disturbed by whatever else the machine is doing."""
    bench_sql.analyze()
    timings = []
    with connection.cursor() as cursor:
        for attempt in range(warmup + repeat):
            started = time.perf_counter()
            cursor.execute(dispatch.DUE_RUNS_SQL, {**queue.mark_params(), "skip": [], "limit": 500})
            cursor.fetchall()
            if attempt >= warmup:  # the first executions warm the cache and the plan
                timings.append((time.perf_counter() - started) * 1000)
    return min(timings)


def _bench_organization() -> Organization:
    """The organization of the bench's real runs: a sandbox, so their sends are only stored."""
    organization = Organization.objects.create(slug="bench", name="Bench", sandbox=True,
                                               default_timezone="America/New_York")
    sim_org.ensure_identities(organization)
    return organization


def _published(version: AgentVersion, organization: Organization) -> AgentVersion:
    """Published through the gate, as the seed command does."""
    scorecards.score(version, organization=organization)
    return gate.publish(version)


def _every_day(version: AgentVersion, organization: Organization) -> AgentVersion:
    """The real runs' agent: published `version` with every day of the week a business day, deployed.

    A real run sends only in its contact's business hours (runs.policy.window), and the bench's real runs run now,
    for a contact in a zone where it is the middle of the day (bench_burst.working_zone). From Saturday morning to
    Sunday evening (UTC) it is a weekday nowhere: every start would hold its message for Monday instead of sending
    it, so the throughput, the burst and the history (copies of sent messages) would measure other episodes than
    on a weekday. With every day a business day the bench measures the same episodes whatever day it runs.

    Published without the gate: `version` passed it, and the copy differs only in its business days; its golden
    cases were written for the template's working week (with seven business days, some expect what they no
    longer see).
    """
    data = yaml_source.load(version.source)
    data["slug"] = f"{version.agent.slug}-every-day"
    data["followup"]["business_days"] = list(WEEKDAYS)
    agent = versions.create_agent(organization, slug=data["slug"], name=data["slug"])
    draft = versions.create_draft(agent, source=yaml.safe_dump(data, sort_keys=False))
    published = versions.publish(draft, scorecard={**(version.gate_scorecard or {}), "copy_of": str(version)})
    versions.deploy(organization, published)
    return published


def _timed(function: Callable, *args, **kwargs) -> float:
    started = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - started


def _contact(version: AgentVersion) -> dict:
    return {"role": version.compiled["contacts"][0]["role"], "name": "Bench Vendor",
            "email": "vendor@bench.example", "phone": "+15550000001", "slack_user": "UBENCH",
            "timezone": "America/New_York"}


def _inputs(version: AgentVersion) -> dict:
    golden = version.compiled.get("evals") or [{}]
    return dict(golden[0].get("inputs") or {})


def _weekday_morning():
    return engine.default_start(Organization(default_timezone="America/New_York"))
