"""django-q2 entry points: ids in, one domain call, result out.

Each stamps the cluster heartbeat around its work (runs.heartbeats): progress
the supervisor and `/healthz/` read.
"""

from datetime import datetime, timedelta

from runs import dispatch, heartbeats, worker

DISPATCH_SCHEDULE = "runs.dispatch_due"
DISPATCH_FUNC = "runs.tasks.dispatch_due"
DISPATCH_EVERY_MINUTES = 1


def advance_run(run_id: int) -> bool:
    with heartbeats.beat():
        return worker.advance_run(run_id)


def dispatch_due() -> dict:
    """Reap first, so episodes it requeues are due in the same pass."""
    with heartbeats.beat():
        reaped = dispatch.reap_expired()
        return {"reaped": reaped, "enqueued": dispatch.dispatch_due()}


def ensure_schedules() -> None:
    """Create the every-minute dispatch schedule if it is missing (migration 0002 does it too)."""
    from django_q.models import Schedule

    Schedule.objects.get_or_create(
        name=DISPATCH_SCHEDULE,
        defaults={"func": DISPATCH_FUNC, "schedule_type": Schedule.MINUTES, "minutes": DISPATCH_EVERY_MINUTES,
                  "repeats": -1},
    )


def last_dispatch_at() -> datetime | None:
    """When the cluster's scheduler last fired dispatch_due (None: never, or no schedule).

    The scheduler moves `next_run` one interval ahead each time it enqueues the task.
    """
    from django_q.models import Schedule

    schedule = Schedule.objects.filter(name=DISPATCH_SCHEDULE).only("next_run", "task").first()
    if schedule is None or not schedule.task or schedule.next_run is None:
        return None
    return schedule.next_run - timedelta(minutes=schedule.minutes or DISPATCH_EVERY_MINUTES)
