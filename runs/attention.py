"""What needs a person: open escalations by age and SLA, overdue runs, stuck runs, unrecovered failures.

Read by the Studio dashboard and by the run list's filters, so a count and the
list it links to are the same query. `now` is the database clock, read once
(`database_now`): leases and due times are compared on it, as the dispatcher
and runs.health compare them. Callers scope the querysets they pass in
(agents.staff) and choose live or simulated work (`live_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Exists, Min, OuterRef, Q, QuerySet

from runs import escalations
from runs.models import OPEN_RUN_STATUSES, Episode, EpisodeStatus, Escalation, EscalationStatus, Run, RunStatus

# A failure is recovered once a later episode of its run is queued, running or done (a retry, a reply).
RECOVERING_STATUSES = (EpisodeStatus.QUEUED, EpisodeStatus.RUNNING, EpisodeStatus.DONE)


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def live_runs(runs: QuerySet[Run], *, include_simulated: bool) -> QuerySet[Run]:
    """Customers' work only, unless simulated work is asked for: no `sim` run, no sandbox organization."""
    return runs if include_simulated else runs.filter(sim=False, organization__sandbox=False)


def live_escalations(rows: QuerySet[Escalation], *, include_simulated: bool) -> QuerySet[Escalation]:
    if include_simulated:
        return rows
    return rows.filter(organization__sandbox=False).exclude(run__sim=True)


def overdue_grace() -> timedelta:
    """How late a due episode may be before its run counts as overdue: /healthz/'s due-lag limit."""
    return timedelta(seconds=settings.LUCIA_HEALTH_MAX_DUE_LAG)


def overdue(runs: QuerySet[Run], *, now: datetime) -> QuerySet[Run]:
    """Open runs with a queued episode due longer ago than the grace."""
    late = Episode.objects.filter(run=OuterRef("pk"), status=EpisodeStatus.QUEUED, due_at__lt=now - overdue_grace())
    return runs.filter(status__in=OPEN_RUN_STATUSES).filter(Exists(late))


def with_first_due(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`first_due`: when the run's oldest queued episode was due (its due-lag is `now - first_due`)."""
    return runs.annotate(first_due=Min("episodes__due_at", filter=Q(episodes__status=EpisodeStatus.QUEUED)))


def stuck(runs: QuerySet[Run], *, now: datetime) -> QuerySet[Run]:
    """Runs holding an expired lease, or with an episode running for longer than a lease lasts."""
    long_running = Episode.objects.filter(
        run=OuterRef("pk"), status=EpisodeStatus.RUNNING,
        started_at__lt=now - timedelta(seconds=settings.LUCIA_LEASE_SECONDS))
    return runs.filter(Q(lease_owner__isnull=False, lease_expires_at__lt=now) | Q(Exists(long_running)))


def with_running_since(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`running_since`: when the run's running episode started (None when none runs)."""
    return runs.annotate(running_since=Min("episodes__started_at", filter=Q(episodes__status=EpisodeStatus.RUNNING)))


def unrecovered_failures(episodes: QuerySet[Episode]) -> QuerySet[Episode]:
    """Failed episodes of open runs after which nothing of the run was queued, ran or finished."""
    later = Episode.objects.filter(run=OuterRef("run"), seq__gt=OuterRef("seq"), status__in=RECOVERING_STATUSES)
    return episodes.filter(status=EpisodeStatus.FAILED, run__status__in=OPEN_RUN_STATUSES).exclude(Exists(later))


def failed(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Open runs with an unrecovered failed episode."""
    return runs.filter(Exists(unrecovered_failures(Episode.objects.filter(run=OuterRef("pk")))))


def waiting_on_human(runs: QuerySet[Run], *, now: datetime, hours: float) -> QuerySet[Run]:
    """Runs waiting for a human whose oldest open escalation was raised more than `hours` ago."""
    old = Escalation.objects.filter(run=OuterRef("pk"), status=EscalationStatus.OPEN,
                                    created_at__lt=now - timedelta(hours=hours))
    return runs.filter(status=RunStatus.WAITING_HUMAN).filter(Exists(old))


@dataclass(frozen=True)
class OpenEscalation:
    escalation: Escalation
    age: timedelta
    sla: timedelta

    @property
    def breached(self) -> bool:
        return self.age > self.sla


@dataclass(frozen=True)
class KindSummary:
    kind: str
    label: str
    count: int
    breached: int
    oldest_age: timedelta


def open_escalations(rows: QuerySet[Escalation], *, now: datetime) -> list[OpenEscalation]:
    """Open escalations, oldest first, each with its age and its agent's `escalation_sla`."""
    opened = (rows.filter(status=EscalationStatus.OPEN).select_related("organization", "run")
              .only("id", "kind", "prompt", "created_at", "organization", "organization__name", "run", "run__plan")
              .order_by("created_at", "id"))
    return [OpenEscalation(escalation=row, age=max(now - row.created_at, timedelta(0)),
                           sla=timedelta(seconds=escalations.sla_seconds(row))) for row in opened]


def by_kind(opened: list[OpenEscalation]) -> list[KindSummary]:
    """One summary per kind with open escalations, the kind with the oldest first."""
    kinds: dict[str, list[OpenEscalation]] = {}
    for item in opened:  # oldest first, so each kind's first item is its oldest
        kinds.setdefault(item.escalation.kind, []).append(item)
    return [KindSummary(kind=kind, label=items[0].escalation.get_kind_display(), count=len(items),
                        breached=sum(item.breached for item in items), oldest_age=items[0].age)
            for kind, items in kinds.items()]
