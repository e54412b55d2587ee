"""Simulate a version's eval cases and keep the result: Simulation rows, and Scorecards the gate reads.

The cases that count for a version are its golden cases (`compiled["evals"]`)
plus the agent's approved generated cases. Only a run over all of them makes
a Scorecard; a run of chosen cases (`simulate --case`) is kept as a
Simulation but proves nothing for publishing.

A run records its progress (cases done of total, the case under way) on its
Simulation row. The Studio hands scoring to a worker instead of running it in
the request: `request` stores a queued Simulation and enqueues
`simulator.tasks.score_requested` in the same transaction, and the task runs
it through `score_requested`. This module is the only writer of Simulation
and Scorecard rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task

from agents.models import AgentVersion, Organization
from simulator import lanes, sim_org
from simulator.models import EvalCase, EvalCaseKind, EvalCaseStatus, Scorecard, Simulation, SimulationStatus

logger = logging.getLogger(__name__)

# progress(case_index, case_count, case_name, fraction of that case done)
Progress = Callable[[int, int, str, float], None]

SCORE_TASK = "simulator.tasks.score_requested"
ACTIVE = (SimulationStatus.QUEUED, SimulationStatus.RUNNING)


class SimulationError(Exception):
    """The version cannot be simulated (invalid config, unknown case)."""


def cases_for(version: AgentVersion) -> list[dict]:
    """Every case that counts for `version`, golden first; each a compiled `evals` entry plus `kind`."""
    golden = [{**case, "kind": EvalCaseKind.GOLDEN} for case in (version.compiled or {}).get("evals", [])]
    names = {case["name"] for case in golden}
    approved = EvalCase.objects.filter(agent_id=version.agent_id, status=EvalCaseStatus.APPROVED).filter(
        Q(version__isnull=True) | Q(version=version)
    )
    # A golden case of the same name wins: the version's own config is the more specific truth.
    generated = [{**case.spec, "name": case.name, "kind": case.kind} for case in approved if case.name not in names]
    return golden + generated


def select_cases(version: AgentVersion, *, names: list[str] | None) -> list[dict]:
    """The named cases (all when `names` is None); SimulationError names the valid choices for a typo."""
    cases = cases_for(version)
    if names is None:
        return cases
    by_name = {case["name"]: case for case in cases}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        choices = ", ".join(by_name) or "none"
        raise SimulationError(f"unknown case {', '.join(unknown)} for {version}; choose from: {choices}")
    return [by_name[name] for name in names]


def run(
    version: AgentVersion,
    *,
    cases: list[dict],
    organization: Organization | None = None,
    seed: int = 0,
    weeks: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    simulation: Simulation | None = None,
) -> Simulation:
    """Simulate `cases` (in `jobs` processes when above 1); returns the finished Simulation with each case's result.

    Each result carries `wall_seconds`, the case's own wall time.

    `simulation` is a requested row a worker has claimed (`score_requested`):
    its organization, seed and weeks are used instead of the arguments.
    A case the engine crashes on counts as failed (with the error as its
    reason) and marks the simulation `error`, so a broken engine never
    produces a passing scorecard.
    """
    if not version.is_valid:
        raise SimulationError(f"{version} has config errors; fix them before simulating")
    if simulation is None:
        simulation = Simulation.objects.create(
            version=version, organization=sim_org.organization_for(organization), seed=seed, weeks=weeks,
            status=SimulationStatus.RUNNING, cases_total=len(cases),
        )
    seed, weeks, sim_organization = simulation.seed, simulation.weeks, simulation.organization
    if jobs > 1 and len(cases) > 1:
        def case_finished(index: int, count: int, name: str, fraction: float) -> None:
            _record_progress(simulation, done=index + 1, total=count, current=name)
            if progress is not None:
                progress(index, count, name, fraction)

        results = lanes.run_cases(run_case, version, cases, organization=sim_organization, seed=seed,
                                  weeks=weeks, jobs=jobs, progress=case_finished)
    else:
        results = []
        for index, case in enumerate(cases):
            _record_progress(simulation, done=index, total=len(cases), current=case["name"])
            results.append(run_case(version, case, organization=sim_organization, seed=seed, weeks=weeks,
                                    progress=_case_progress(progress, index=index, count=len(cases),
                                                            name=case["name"])))
    crashed = any([result.pop("crashed", False) for result in results])
    if progress is not None:
        progress(len(cases), len(cases), "", 1.0)
    passed = bool(results) and all(result["passed"] for result in results)
    simulation.status = SimulationStatus.ERROR if crashed else (
        SimulationStatus.PASSED if passed else SimulationStatus.FAILED
    )
    simulation.results = results
    simulation.cases_done, simulation.cases_total, simulation.current_case = len(cases), len(cases), ""
    simulation.finished_at = timezone.now()
    simulation.save(update_fields=["status", "results", "cases_done", "cases_total", "current_case", "finished_at"])
    return simulation


def score(
    version: AgentVersion,
    *,
    organization: Organization | None = None,
    seed: int = 0,
    weeks: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    simulation: Simulation | None = None,
) -> Scorecard:
    """Simulate every case that counts for `version` and save the Scorecard the gate will read."""
    simulation = run(version, cases=cases_for(version), organization=organization, seed=seed, weeks=weeks,
                     progress=progress, jobs=jobs, simulation=simulation)
    weeks = simulation.weeks
    summary = build(simulation.results, weeks=weeks)
    return Scorecard.objects.create(
        version=version, config_hash=version.config_hash, passed=summary["passed"], cases=summary["cases"],
        metrics=summary["metrics"], seed=simulation.seed, simulation=simulation,
    )


def request(version: AgentVersion, *, organization: Organization | None, user=None, seed: int = 0,
            weeks: int | None = None) -> Simulation:
    """Queue a scorecard run of `version` for a worker; returns the queued Simulation to poll for progress.

    Refused (SimulationError) for an invalid version, and while another
    requested simulation of it is still queued or running.
    """
    if not version.is_valid:
        raise SimulationError(f"{version} has config errors; fix them before simulating")
    sim_organization = sim_org.organization_for(organization)
    with transaction.atomic():
        # The version row lock serializes two requests for the same version.
        AgentVersion.objects.select_for_update(no_key=True).filter(pk=version.pk).get()
        busy = active_request(version)
        if busy is not None:
            waiting = "waiting for a worker" if busy.status == SimulationStatus.QUEUED else "running"
            raise SimulationError(f"simulation #{busy.pk} of {version} is still {waiting}; wait for its scorecard")
        simulation = Simulation.objects.create(
            version=version, organization=sim_organization, seed=seed, weeks=weeks, status=SimulationStatus.QUEUED,
            cases_total=len(cases_for(version)), queued_at=timezone.now(), requested_by=user,
        )
        # ORM broker: the queue row commits with the Simulation, or neither exists.
        async_task(SCORE_TASK, simulation.pk, task_name=f"score-simulation-{simulation.pk}", group="score_simulation")
    return simulation


def score_requested(simulation_id: int) -> bool:
    """Run a queued simulation to its scorecard (the worker's half of `request`); returns whether it ran one.

    Only a queued row is claimed, so a task delivered twice runs it once.
    """
    claimed = Simulation.objects.filter(pk=simulation_id, status=SimulationStatus.QUEUED).update(
        status=SimulationStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return False
    simulation = Simulation.objects.select_related("version__agent", "organization").get(pk=simulation_id)
    try:
        score(simulation.version, simulation=simulation)
    except SimulationError as refused:  # the draft was edited into an invalid config while it waited
        _record_error(simulation, str(refused))
    except Exception as error:
        _record_error(simulation, f"the simulation stopped: {type(error).__name__}: {error}")
        raise
    return True


def active_request(version: AgentVersion) -> Simulation | None:
    """The requested simulation of `version` still queued or running on a live worker, if any."""
    for simulation in Simulation.objects.filter(version=version, queued_at__isnull=False, status__in=ACTIVE):
        if not stalled(simulation):
            return simulation
    return None


def stalled(simulation: Simulation) -> bool:
    """A requested simulation still `running` after django-q2's timeout: the cluster killed its worker."""
    if simulation.queued_at is None or simulation.status != SimulationStatus.RUNNING:
        return False
    age = (timezone.now() - simulation.started_at).total_seconds()
    return age > float(settings.Q_CLUSTER["timeout"])


def build(results: list[dict], *, weeks: int | None = None) -> dict:
    """Scorecard fields from case result dicts: {passed, cases, metrics}. No cases is a failure: nothing was shown."""
    cases = [
        {key: result.get(key) for key in ("name", "kind", "passed", "reasons", "metrics", "run_id", "wall_seconds")}
        for result in results
    ]
    metrics = aggregate([case["metrics"] or {} for case in cases])
    metrics.update(cases=len(cases), passed=sum(1 for case in cases if case["passed"]), weeks=weeks)
    metrics["failed"] = metrics["cases"] - metrics["passed"]
    passed = bool(cases) and metrics["failed"] == 0
    if not cases:
        metrics["reason"] = "no eval cases: add golden cases under `evals` or approve generated ones"
    return {"passed": passed, "cases": cases, "metrics": metrics}


def aggregate(per_case: list[dict]) -> dict:
    """Totals over the cases' metrics; `days_to_done` becomes the mean over the cases that finished."""
    totals: dict[str, Any] = {}
    for key in ("messages", "escalations", "tokens", "episodes", "policy_violations", "quiet_hour_sends",
                "duplicate_sends"):
        totals[key] = sum(int(metrics.get(key) or 0) for metrics in per_case)
    # Drafts answered in approval mode (simulator.approvers), by decision.
    approvals: dict[str, int] = {}
    for metrics in per_case:
        for decision, count in (metrics.get("approvals") or {}).items():
            approvals[decision] = approvals.get(decision, 0) + int(count)
    totals["approvals"] = dict(sorted(approvals.items()))
    totals["cost_usd"] = round(sum(float(metrics.get("cost_usd") or 0) for metrics in per_case), 6)
    days = [metrics["days_to_done"] for metrics in per_case if metrics.get("days_to_done") is not None]
    totals["mean_days_to_done"] = round(sum(days) / len(days), 2) if days else None
    return totals


def as_dict(scorecard: Scorecard) -> dict:
    """The scorecard as the API, the gate and `simulate --json` show it."""
    version = scorecard.version
    return {
        "id": scorecard.pk,
        "agent": version.agent.slug,
        "version": version.number,
        "version_id": version.pk,
        "config_hash": scorecard.config_hash,
        "passed": scorecard.passed,
        "seed": scorecard.seed,
        "created_at": scorecard.created_at.isoformat(),
        "metrics": scorecard.metrics,
        "cases": scorecard.cases,
        "simulation_id": scorecard.simulation_id,
    }


def latest(version: AgentVersion, *, config_hash: str | None = None) -> Scorecard | None:
    """The newest scorecard of `version` for `config_hash` (default: the version's current hash)."""
    config_hash = version.config_hash if config_hash is None else config_hash
    return (
        Scorecard.objects.filter(version=version, config_hash=config_hash)
        .select_related("version__agent")
        .order_by("-created_at", "-id")
        .first()
    )


def _record_progress(simulation: Simulation, *, done: int, total: int, current: str) -> None:
    # Committed at once (no transaction is open around a run), so a page polling the row sees each case start.
    simulation.cases_done, simulation.cases_total, simulation.current_case = done, total, current[:120]
    Simulation.objects.filter(pk=simulation.pk).update(cases_done=done, cases_total=total, current_case=current[:120])


def _record_error(simulation: Simulation, error: str) -> None:
    Simulation.objects.filter(pk=simulation.pk).update(
        status=SimulationStatus.ERROR, error=error[:2000], finished_at=timezone.now(), current_case=""
    )


def run_case(version: AgentVersion, case: dict, *, organization: Organization, seed: int, weeks: int | None,
             progress: Callable[..., None] | None = None) -> dict:
    """One case's result dict (a crash is a failed case with `crashed`), with its wall time in `wall_seconds`."""
    from simulator import engine  # imported on use: the engine pulls in the whole runtime

    spec = {key: value for key, value in case.items() if key != "kind"}
    started = time.perf_counter()
    try:
        result = engine.run_case(version, spec, organization=organization, seed=seed, weeks=weeks, progress=progress)
    except Exception as error:  # noqa: BLE001 - one broken case must not hide the others' results
        logger.exception("simulation of %s case %s crashed", version, case["name"])
        result = {"name": case["name"], "passed": False, "crashed": True,
                  "reasons": [f"simulation error: {type(error).__name__}: {error}"], "metrics": {},
                  "run_id": None, "timeline": []}
    else:
        result = result.as_dict()
    return {**result, "kind": case.get("kind"), "wall_seconds": round(time.perf_counter() - started, 4)}


def _case_progress(progress: Progress | None, *, index: int, count: int, name: str) -> Callable[..., None] | None:
    """Adapt the engine's per-case callback to (index, count, name, fraction)."""
    if progress is None:
        return None

    def report(*args: Any, **kwargs: Any) -> None:
        progress(index, count, name, _fraction(*args, **kwargs))

    progress(index, count, name, 0.0)
    return report


def _fraction(*args: Any, **kwargs: Any) -> float:
    # Accepts progress(fraction) or progress(done, total), positionally or by name.
    numbers = [value for value in (*args, *kwargs.values()) if isinstance(value, int | float)]
    if len(numbers) >= 2 and numbers[1]:
        return max(0.0, min(1.0, numbers[0] / numbers[1]))
    if numbers:
        return max(0.0, min(1.0, float(numbers[0])))
    return 0.0
