"""django-q2 entry points of the simulator: ids in, one domain call, result out."""

from runs import heartbeats
from simulator import scorecards


def score_requested(simulation_id: int) -> bool:
    """Run a simulation the Studio queued (scorecards.request); stamps the cluster heartbeat like runs.tasks."""
    with heartbeats.beat():
        return scorecards.score_requested(simulation_id)
