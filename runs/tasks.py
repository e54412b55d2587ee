"""django-q2 entry points: ids in, one domain call, result out.

Each stamps the cluster heartbeat around its work (runs.heartbeats): progress
the supervisor and `/healthz/` read.
"""

import logging

from runs import dispatch, heartbeats, worker

logger = logging.getLogger(__name__)

DISPATCH_SCHEDULE = "runs.dispatch_due"
DISPATCH_FUNC = "runs.tasks.dispatch_due"
DISPATCH_EVERY_MINUTES = 1


def advance_run(run_id: int) -> bool:
    with heartbeats.beat():
        return worker.advance_run(run_id)


def dispatch_due() -> dict:
    """Reap first, so episodes it requeues are due in the same pass; a failing reap never holds back the timers."""
    with heartbeats.beat():
        try:
            reaped = dispatch.reap_expired()
        except Exception:  # the reaper isolates each run; this is the pass itself (e.g. its query) failing
            logger.exception("reap pass failed; dispatching anyway")
            reaped = 0
        return {"reaped": reaped, "enqueued": dispatch.dispatch_due()}


def ensure_schedules() -> None:
    """Create the every-minute dispatch schedule if it is missing (migration 0002 does it too)."""
    from django_q.models import Schedule

    Schedule.objects.get_or_create(
        name=DISPATCH_SCHEDULE,
        defaults={"func": DISPATCH_FUNC, "schedule_type": Schedule.MINUTES, "minutes": DISPATCH_EVERY_MINUTES,
                  "repeats": -1},
    )

