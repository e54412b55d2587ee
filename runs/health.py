"""Is the runtime making progress? One report for `/healthz/` and the Studio dashboard.

Everything is read from PostgreSQL, on its clock: what the workers executed
(runs.heartbeats), what is due and not executed, what waits in django-q2's queue,
which runs hold an expired lease, what failed lately. A threshold crossed
(settings LUCIA_HEALTH_*, in seconds) makes the report unhealthy and names why.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection

from runs import heartbeats
from runs.models import ClusterHeartbeat

# Walks the partial index episode_due (status='queued', by due_at), as the dispatcher does.
DUE_SQL = """
SELECT count(*), min(e.due_at)
  FROM runs_episode e
  JOIN runs_run r ON r.id = e.run_id
 WHERE e.status = 'queued' AND e.due_at <= statement_timestamp()
   AND NOT r.sim AND r.status IN ('active', 'waiting', 'waiting_human')
"""

EXPIRED_LEASES_SQL = """
SELECT count(*), min(lease_expires_at)
  FROM runs_run
 WHERE lease_owner IS NOT NULL AND lease_expires_at < statement_timestamp() AND NOT sim
"""

FAILED_SQL = """
SELECT count(*)
  FROM runs_episode e
  JOIN runs_run r ON r.id = e.run_id
 WHERE e.status = 'failed' AND e.finished_at >= statement_timestamp() - interval '1 hour' AND NOT r.sim
"""


@dataclass(frozen=True)
class Report:
    database: str
    checked_at: datetime | None = None
    last_task_executed_at: datetime | None = None
    seconds_since_last_task: float | None = None
    due_episodes: int = 0
    due_lag_seconds: float | None = None  # how long the oldest due, unexecuted episode of a live run has waited
    queued_tasks: int = 0
    oldest_queued_task_seconds: float | None = None
    expired_leases: int = 0
    oldest_expired_lease_seconds: float | None = None
    failed_episodes_last_hour: int = 0
    clusters: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"healthy": self.healthy, **asdict(self)}


def report() -> Report:
    """Measure now; a database that does not answer is the only problem reported then."""
    try:
        measured = _measure()
    except Exception as exc:  # any driver error means the database is not usable
        connection.close()
        return Report(database=f"error: {exc.__class__.__name__}", problems=["database is not answering"])
    return Report(**measured, problems=_problems(measured))


def _measure() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
        cursor.execute(DUE_SQL)
        due_episodes, oldest_due = cursor.fetchone()
        cursor.execute(EXPIRED_LEASES_SQL)
        expired_leases, oldest_expiry = cursor.fetchone()
        cursor.execute(FAILED_SQL)
        failed = cursor.fetchone()[0]
    queued, oldest_enqueued = _queue()
    clusters = list(ClusterHeartbeat.objects.values())
    last_task = max((c["last_task_finished_at"] for c in clusters if c["last_task_finished_at"]), default=None)
    return {
        "database": "ok", "checked_at": now,
        "last_task_executed_at": last_task, "seconds_since_last_task": _age(now, last_task),
        "due_episodes": due_episodes, "due_lag_seconds": _age(now, oldest_due),
        "queued_tasks": queued, "oldest_queued_task_seconds": _age(now, oldest_enqueued),
        "expired_leases": expired_leases, "oldest_expired_lease_seconds": _age(now, oldest_expiry),
        "failed_episodes_last_hour": failed, "clusters": clusters,
    }


def _queue() -> tuple[int, datetime | None]:
    """Rows in django-q2's queue (waiting, or taken and not yet acknowledged) and the oldest one's enqueue time.

    Row ids follow enqueue order; the enqueue time is in the signed payload (`started`).
    """
    from django_q.models import OrmQ

    rows = OrmQ.objects.filter(key=heartbeats.queue_key())
    count = rows.count()
    oldest = rows.order_by("id").first()
    if oldest is None:
        return 0, None
    started = oldest.task.get("started")
    return count, started if isinstance(started, datetime) else oldest.lock


def _problems(m: dict) -> list[str]:
    problems = []
    due_lag, queue_age = m["due_lag_seconds"], m["oldest_queued_task_seconds"]
    if due_lag is not None and due_lag > settings.LUCIA_HEALTH_MAX_DUE_LAG:
        problems.append(f"due-lag: an episode due {due_lag:.0f}s ago is not executed"
                        f" (limit {settings.LUCIA_HEALTH_MAX_DUE_LAG}s; {m['due_episodes']} due)")
    if queue_age is not None and queue_age > settings.LUCIA_HEALTH_MAX_QUEUE_AGE:
        problems.append(f"queue: the oldest of {m['queued_tasks']} queued tasks has waited {queue_age:.0f}s"
                        f" (limit {settings.LUCIA_HEALTH_MAX_QUEUE_AGE}s)")
    waited = max(due_lag or 0, queue_age or 0)
    idle = m["seconds_since_last_task"]
    limit = settings.LUCIA_HEALTH_MAX_IDLE
    if (m["due_episodes"] or m["queued_tasks"]) and (idle if idle is not None else waited) > limit:
        since = f"for {idle:.0f}s" if idle is not None else "ever"
        problems.append(f"workers: no task executed {since} while work waits (limit {limit}s)")
    expired_for = m["oldest_expired_lease_seconds"]
    if expired_for is not None and expired_for > settings.LUCIA_HEALTH_MAX_EXPIRED_LEASE:
        problems.append(f"leases: {m['expired_leases']} run(s) hold an expired lease, the oldest expired"
                        f" {expired_for:.0f}s ago (limit {settings.LUCIA_HEALTH_MAX_EXPIRED_LEASE}s)")
    max_failed = settings.LUCIA_HEALTH_MAX_FAILED_LAST_HOUR
    if max_failed and m["failed_episodes_last_hour"] > max_failed:
        problems.append(f"failures: {m['failed_episodes_last_hour']} episodes failed in the last hour"
                        f" (limit {max_failed})")
    return problems


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max((now - then).total_seconds(), 0.0)
