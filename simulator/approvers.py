"""The simulated human of an agent in approval mode: answers each draft waiting for approval, in order.

A case's `approvals` script (agents.config.schema_evals) says what happens to the 1st, 2nd, ... draft;
drafts after the last step are approved. Answers go through runs.answers (the options runs.approvals
registers), the path the Studio and the API take, at the run's virtual time.
"""

from __future__ import annotations

from collections import Counter

from runs import answers, approvals
from runs.models import Escalation, EscalationKind, EscalationStatus

VIA = "simulator"
# What each scripted action counts as on the scorecard.
COUNTED_AS = {"approve": "approved", "edit": "edited", "reject": "rejected"}


class Approver:
    def __init__(self, steps: list[dict] | None = None) -> None:
        self.steps = list(steps or [])
        self.counts: Counter[str] = Counter()

    def answer_open(self, run_id: int) -> int:
        """Answer the run's open approvals, oldest first; returns how many were answered.

        An edit the guardrail refuses is counted as `edit_refused` and the draft stays open: a case that
        scripts a blocked edit shows it as a run waiting for a human.
        """
        answered = 0
        waiting = Escalation.objects.filter(run_id=run_id, kind=EscalationKind.APPROVAL, status=EscalationStatus.OPEN)
        for escalation in waiting.order_by("id"):
            step = self.steps.pop(0) if self.steps else {"action": "approve", "text": ""}
            action, text = step["action"], step.get("text") or ""
            try:
                answers.answer(escalation, option=action, text=text, via=VIA)
            except approvals.EditRefused:
                self.counts["edit_refused"] += 1
                continue
            self.counts[COUNTED_AS[action]] += 1
            answered += 1
        return answered
