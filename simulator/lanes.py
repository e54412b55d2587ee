"""`simulate --jobs N`: a version's cases in N forked processes, each lane in its own shadow organization.

Every case is still one ordinary simulated run on the same code path; a lane is
only a process with its own database connection and its own shadow
organization (sim_org.lane_organization), so cases running side by side share
nothing but the version. Results come back in the cases' order, so a parallel
run reads exactly like a serial one for the same seed.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable

from django.db import connection, connections

from agents.models import AgentVersion, Organization
from simulator import sim_org

# run_one(version, case, organization=, seed=, weeks=) -> the case's result dict (scorecards.run_case)
RunOne = Callable[..., dict]


class ParallelSimulationError(RuntimeError):
    """Lanes were asked for inside a transaction: forked processes cannot see its uncommitted rows."""


def run_cases(run_one: RunOne, version: AgentVersion, cases: list[dict], *, organization: Organization, seed: int,
              weeks: int | None, jobs: int, progress: Callable[[int, int, str, float], None] | None = None,
              ) -> list[dict]:
    if connection.in_atomic_block:
        raise ParallelSimulationError("simulating in parallel (--jobs) needs the version committed: call it outside "
                                      "a transaction, or with jobs=1")
    jobs = min(jobs, len(cases))
    lane_ids = [sim_org.lane_organization(organization, lane).pk for lane in range(jobs)]
    work = [(run_one, version.pk, case, lane_ids[index % jobs], seed, weeks) for index, case in enumerate(cases)]
    # A forked child must open its own connection: one shared socket would interleave both sides' queries.
    connections.close_all()
    results = []
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        for index, result in enumerate(pool.imap(_run_in_lane, work)):
            results.append(result)
            if progress is not None:
                progress(index, len(cases), result["name"], 1.0)
    return results


def _run_in_lane(work: tuple) -> dict:
    run_one, version_id, case, organization_id, seed, weeks = work
    try:
        version = AgentVersion.objects.select_related("agent").get(pk=version_id)
        organization = Organization.objects.get(pk=organization_id)
        return run_one(version, case, organization=organization, seed=seed, weeks=weeks)
    finally:
        connections.close_all()
