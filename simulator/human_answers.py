"""The simulated human who answers a run's escalations (approvals aside: simulator.approvers has those).

A case's `human` script (agents/config/schema_evals.py HumanStep) answers
escalations in order: step n answers the oldest escalation still open (of the
step's `kind`, when given) `after` it was raised, in virtual time. Answers go
through runs.answers, the path the Studio, the API and Slack buttons take, so
the option acts exactly as a person's click would. A step the option refuses
is reported, not retried: the case's script is wrong, and its reasons say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from runs import answers, cancellation, escalations, events
from runs.models import Escalation, EscalationKind, EscalationStatus

VIA = "simulator"


@dataclass
class HumanAnswer:
    """One step as it played out: what it answered, when, and why it could not (`error`)."""

    step: int
    option: str
    at: datetime
    escalation_id: int | None = None
    escalation_kind: str = ""
    error: str = ""


class Human:
    def __init__(self, steps: list[dict] | None = None) -> None:
        self.steps = list(steps or [])
        self.answers: list[HumanAnswer] = []

    def pending(self) -> bool:
        """Whether a scripted step is still to answer (next_at then reads the run's escalations)."""
        return len(self.answers) < len(self.steps)

    def next_at(self, run_id: int) -> datetime | None:
        """When the next step answers (its escalation's raise + after), or None while nothing waits for it."""
        found = self._next(run_id)
        return found[1] if found else None

    def answer_due(self, run_id: int, *, now: datetime) -> list[HumanAnswer]:
        """Answer every step due by `now`, in order; returns what they did."""
        done = []
        while (found := self._next(run_id)) is not None and found[1] <= now:
            escalation, at = found
            done.append(self._answer(escalation, at=at))
        return done

    def _next(self, run_id: int) -> tuple[Escalation, datetime] | None:
        if not self.pending():
            return None
        step = self.steps[len(self.answers)]
        waiting = (Escalation.objects.filter(run_id=run_id, status=EscalationStatus.OPEN)
                   .exclude(kind=EscalationKind.APPROVAL).order_by("raised_at", "pk"))
        if step.get("kind"):
            waiting = waiting.filter(kind=step["kind"])
        escalation = waiting.first()
        if escalation is None or escalation.raised_at is None:
            return None
        return escalation, escalation.raised_at + timedelta(seconds=step.get("after") or 0)

    def _answer(self, escalation: Escalation, *, at: datetime) -> HumanAnswer:
        step = self.steps[len(self.answers)]
        record = HumanAnswer(step=len(self.answers), option=step["option"], at=at, escalation_id=escalation.pk,
                             escalation_kind=escalation.kind)
        try:
            answers.answer(escalation, option=step["option"], text=step.get("text") or "",
                           data=dict(step.get("data") or {}), via=VIA)
        except (answers.AnswerRefused, escalations.EscalationClosed, cancellation.RunNotOpen,
                events.RunEnded) as refused:
            record.error = str(refused)
        self.answers.append(record)
        return record
