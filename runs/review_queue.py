"""The escalation review queue: its order, SLA deadlines, what a reviewer sees of the run, and answers in bulk.

Read by the Studio's queue (runs.admin_queue) and the dashboard's links into it. The SLA is the agent's
`followup.escalation_sla` (compiled into the run's plan as `escalation_sla_s`; runs.escalations.sla_seconds,
the same one the second notice waits for), counted from when the escalation was created (wall time: a
person answers it). Writes go through runs.answers and runs.escalations only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Case, DurationField, F, FloatField, Func, IntegerField, QuerySet, Value, When
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce

from runs import answer_options, answers, cancellation, clock, escalations, events
from runs.models import Escalation, EscalationKind, EscalationStatus, OutboxMessage, Run
from runs.timeline import TimelineItem, timeline_for

# Options a reviewer may apply to many escalations at once: they need no words or data, and nothing they do
# reaches a contact. The rest (approvals, replies, edits, sends) are answered one by one on their page.
BULK_OPTIONS = ("dismiss", "stop_run")
RECENT_MESSAGES = 10


class MakeInterval(Func):
    """PostgreSQL's make_interval(secs => …): the SLA seconds as an interval to add to a timestamp."""

    template = "make_interval(secs => %(expressions)s)"
    output_field = DurationField()


def queue_order() -> list:
    """Open first, then oldest (the admin's ordering, usable before the SLA annotation exists)."""
    open_first = Case(When(status=EscalationStatus.OPEN, then=Value(0)), default=Value(1),
                      output_field=IntegerField())
    return [open_first.asc(), "created_at", "id"]


def with_sla(queryset: QuerySet[Escalation]) -> QuerySet[Escalation]:
    """Each row annotated with its `sla_due_at`: created_at + the run's escalation_sla (default 4h)."""
    sla_s = Coalesce(Cast(KeyTextTransform("escalation_sla_s", KeyTransform("followup", "run__plan")), FloatField()),
                     Value(float(escalations.DEFAULT_ESCALATION_SLA_S)))
    return queryset.annotate(sla_due_at=F("created_at") + MakeInterval(sla_s))


def in_queue_order(queryset: QuerySet[Escalation]) -> QuerySet[Escalation]:
    """The rows as the queue lists them, each with its `sla_due_at` (for pages outside the admin's list)."""
    return with_sla(queryset).order_by(*queue_order())


def breached(queryset: QuerySet[Escalation]) -> QuerySet[Escalation]:
    """Open escalations past their SLA (the queryset comes from with_sla)."""
    return queryset.filter(status=EscalationStatus.OPEN, sla_due_at__lt=clock.wall_now())


def within_sla(queryset: QuerySet[Escalation]) -> QuerySet[Escalation]:
    return queryset.filter(status=EscalationStatus.OPEN, sla_due_at__gte=clock.wall_now())


def sla_due_at(escalation: Escalation) -> datetime:
    """When the escalation's SLA runs out (the annotation's value when the row came from with_sla)."""
    annotated = getattr(escalation, "sla_due_at", None)
    if annotated is not None:
        return annotated
    return escalation.created_at + timedelta(seconds=escalations.sla_seconds(escalation))


def is_breached(escalation: Escalation) -> bool:
    return escalation.status == EscalationStatus.OPEN and sla_due_at(escalation) < clock.wall_now()


def recent_messages(run: Run, *, limit: int = RECENT_MESSAGES) -> list[TimelineItem]:
    """The run's latest sends and inbound messages, oldest of them first (from its timeline)."""
    messages = [item for item in timeline_for(run, include_journal=False)
                if item.type == "outbound" or item.direction == "in"]
    return messages[-limit:]


@dataclass(frozen=True)
class SendInDoubt:
    """An uncertain send as the reviewer weighs it: the outbox row and what the provider's lookup said."""

    message: OutboxMessage
    # runs.provider_faults.lookup_report, when the lookup ran (older escalations have none).
    lookup: dict
    # The row's last error: the provider's words, or the runtime's when it could not ask.
    error: str


def send_in_doubt(escalation: Escalation) -> SendInDoubt | None:
    if escalation.kind != EscalationKind.UNCERTAIN_SEND or escalation.outbox_message_id is None:
        return None
    message = OutboxMessage.objects.filter(pk=escalation.outbox_message_id).first()
    if message is None:
        return None
    return SendInDoubt(message=message, lookup=(escalation.context or {}).get("provider_lookup") or {},
                       error=message.error)


@dataclass
class BulkTally:
    """What a bulk answer did, escalation ids by outcome (one summary message reports it)."""

    option: str
    done: list[int] = field(default_factory=list)
    # The option does not fit them (their kind, or nothing to act on): answer them on their page.
    not_fitting: list[int] = field(default_factory=list)
    already_closed: list[int] = field(default_factory=list)
    # Refused by the answer itself (e.g. the run has ended), with the reason.
    refused: dict[int, str] = field(default_factory=dict)

    def summary(self) -> str:
        label = answer_options.get(self.option).label
        parts = [f"“{label}”: {len(self.done)} done"]
        if self.not_fitting:
            parts.append(f"{len(self.not_fitting)} skipped because the option does not fit them "
                         f"({_ids(self.not_fitting)}: answer those on their own page)")
        if self.already_closed:
            parts.append(f"{len(self.already_closed)} already closed ({_ids(self.already_closed)})")
        if self.refused:
            parts.append(f"{len(self.refused)} refused (" + "; ".join(
                f"#{pk}: {why}" for pk, why in self.refused.items()) + ")")
        return ", ".join(parts) + "."


def answer_many(selected: Iterable[Escalation], *, option: str, by_user, via: str = "admin") -> BulkTally:
    """Apply a bulk-safe option to each escalation through runs.answers, one at a time; one failing never
    stops the rest."""
    if option not in BULK_OPTIONS:
        raise ValueError(f"{option!r} is not applied in bulk; use one of {', '.join(BULK_OPTIONS)}")
    tally = BulkTally(option=option)
    for escalation in selected:
        if escalation.status != EscalationStatus.OPEN:
            tally.already_closed.append(escalation.pk)
        elif option not in {fit.name for fit in answer_options.fitting(escalation)}:
            tally.not_fitting.append(escalation.pk)
        else:
            try:
                answers.answer(escalation, option=option, by_user=by_user, via=via)
                tally.done.append(escalation.pk)
            except escalations.EscalationClosed:
                tally.already_closed.append(escalation.pk)
            except (answers.AnswerRefused, cancellation.RunNotOpen, events.RunEnded) as refused:
                tally.refused[escalation.pk] = getattr(refused, "message", str(refused))
    return tally


def _ids(pks: list[int]) -> str:
    return ", ".join(f"#{pk}" for pk in pks)
