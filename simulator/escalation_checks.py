"""Expectations about escalations: how many and which, how early, and what the run did around them.

Escalations are the run's own (approvals aside: the scorecard counts those
apart). Days are calendar days in the organization's zone (run_facts.Facts.day).
"""

from __future__ import annotations

from runs.models import EpisodeKind, EpisodeStatus, EscalationStatus, RunStatus
from simulator.run_facts import Facts

# Episodes a timer starts: the run waking by itself rather than for a person.
TIMER_KINDS = (EpisodeKind.START, EpisodeKind.FOLLOWUP)


def check(expect: dict, facts: Facts) -> list[str]:
    reasons = []
    raised = [f"{e.kind} on day {facts.day(e.raised_at or facts.start)}" for e in facts.escalations]
    count = expect.get("escalations")
    if count is not None and len(facts.escalations) != count:
        reasons.append(f"escalations: {len(facts.escalations)} raised, expected exactly {count}"
                       f" ({', '.join(raised) or 'none'})")
    kinds = expect.get("escalation_kinds")
    if kinds is not None and [e.kind for e in facts.escalations] != list(kinds):
        reasons.append(f"escalation_kinds: raised [{', '.join(e.kind for e in facts.escalations)}], expected "
                       f"[{', '.join(kinds)}]")
    by_day = expect.get("escalated_by_day")
    if by_day is not None and not any(e.raised_at and facts.day(e.raised_at) <= by_day for e in facts.escalations):
        reasons.append(f"escalated_by_day: no escalation by day {by_day} ({', '.join(raised) or 'none at all'})")
    if expect.get("no_episodes_after_escalation"):
        reasons += [f"no_episodes_after_escalation: {problem}" for problem in timers_while_escalated(facts)]
    if expect.get("no_open_escalation_at_completion") and facts.run.status == RunStatus.COMPLETED:
        still = [e for e in facts.escalations if e.status == EscalationStatus.OPEN]
        if still:
            reasons.append(f"no_open_escalation_at_completion: the run completed with {len(still)} open "
                           f"({', '.join(f'{e.kind} #{e.pk}' for e in still)})")
    return reasons


def timers_while_escalated(facts: Facts) -> list[str]:
    """Timer episodes that ran while an escalation was open (from its raise to its answer, or the end)."""
    problems = []
    for escalation in facts.escalations:
        if escalation.raised_at is None:
            continue
        closed = escalation.answered_at if escalation.status != EscalationStatus.OPEN else None
        for episode in facts.episodes:
            if (episode.kind in TIMER_KINDS and episode.status == EpisodeStatus.DONE
                    and escalation.raised_at < episode.due_at and (closed is None or episode.due_at < closed)):
                problems.append(f"a {episode.kind} episode ran on day {facts.day(episode.due_at)} while the "
                                f"{escalation.kind} escalation of day {facts.day(escalation.raised_at)} was open")
    return problems
