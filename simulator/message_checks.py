"""Expectations about what was sent when: counts in day ranges and periods, quiet periods, content.

A sent message is `chasing` unless it went out in answer to the contact's own
message (an inbound or call-report episode): then it is an `acknowledgement`.
So a thank-you after every reply counts apart from the reminders, and "one
check-in a week" counts only what the agent sent on its own initiative.
Days are calendar days in the organization's zone (run_facts.Facts.day).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runs.models import EpisodeKind, OutboxMessage
from simulator.run_facts import Facts

ANSWER_KINDS = (EpisodeKind.INBOUND, EpisodeKind.CALL_REPORT)
TEXT_FIELDS = ("subject", "body", "text", "brief")


def kind_of(message: OutboxMessage) -> str:
    return "acknowledgement" if getattr(message, "episode_kind", "") in ANSWER_KINDS else "chasing"


def of_kind(facts: Facts, kind: str, *, days: list[int] | None = None) -> list[OutboxMessage]:
    return [m for m in facts.sent if (kind == "any" or kind_of(m) == kind)
            and (days is None or days[0] <= facts.day(m.sent_at) <= days[1])]


def check(expect: dict, facts: Facts) -> list[str]:
    reasons = []
    for rule in expect.get("messages") or []:
        found = of_kind(facts, rule.get("kind") or "any", days=rule.get("days"))
        where = f"{_label(rule.get('kind'))} on days {rule['days'][0]}..{rule['days'][1]}" if rule.get("days") \
            else f"{_label(rule.get('kind'))} in the whole run"
        reasons += _bounds("messages", rule, len(found), where=where, shown=describe(facts, found))
    for rule in expect.get("per_period") or []:
        reasons += _per_period(rule, facts)
    for rule in expect.get("quiet_after") or []:
        reasons += _quiet_after(rule, facts)
    for rule in expect.get("content") or []:
        reasons += _content(rule, facts)
    return reasons


def _bounds(name: str, rule: dict, count: int, *, where: str, shown: str) -> list[str]:
    if rule.get("min") is not None and count < rule["min"]:
        return [f"{name}: {count} {where}, expected at least {rule['min']}" + (f" ({shown})" if shown else "")]
    if rule.get("max") is not None and count > rule["max"]:
        return [f"{name}: {count} {where}, expected at most {rule['max']} ({shown})"]
    return []


def _per_period(rule: dict, facts: Facts) -> list[str]:
    """Each whole period of `days` days from `from_day` up to the last simulated day."""
    reasons, first = [], rule.get("from_day") or 0
    while first + rule["days"] - 1 <= facts.last_day:
        days = [first, first + rule["days"] - 1]
        found = of_kind(facts, rule.get("kind") or "chasing", days=days)
        reasons += _bounds("per_period", rule, len(found), where=f"{_label(rule.get('kind') or 'chasing')} on days "
                           f"{days[0]}..{days[1]}", shown=describe(facts, found))
        first += rule["days"]
    return reasons


def _quiet_after(rule: dict, facts: Facts) -> list[str]:
    at = event_time(rule["event"], facts)
    if at is None:
        return []
    until = at + timedelta(days=rule["days"])
    loud = [m for m in of_kind(facts, rule.get("kind") or "any") if at < m.sent_at <= until]
    if not loud:
        return []
    return [f"quiet_after: {len(loud)} {_label(rule.get('kind'))} within {rule['days']:g} day(s) after the "
            f"{rule['event'].replace('_', ' ')} on day {facts.day(at)} ({describe(facts, loud)})"]


def event_time(event: str, facts: Facts) -> datetime | None:
    """When `event` first happened in the run (the last time for `last_reply`), or None if it never did."""
    if event in ("first_reply", "last_reply"):
        replies = sorted(e.due_at for e in facts.episodes if e.kind in ANSWER_KINDS)
        return (replies[0] if event == "first_reply" else replies[-1]) if replies else None
    if event == "escalation":
        return min((e.raised_at for e in facts.escalations if e.raised_at), default=None)
    if event == "task_done":
        return min((t.done_at for t in facts.tasks if t.done_at), default=None)
    if event == "opt_out":
        return min(facts.suppressed.values(), default=None)
    if event == "human_answer":
        return min((e.due_at for e in facts.episodes if e.kind == EpisodeKind.HUMAN_ANSWER), default=None)
    raise ValueError(f"unknown event {event!r}")


def _content(rule: dict, facts: Facts) -> list[str]:
    found = of_kind(facts, rule.get("kind") or "any", days=rule.get("days"))
    scope = _label(rule.get("kind")) + (f" on days {rule['days'][0]}..{rule['days'][1]}" if rule.get("days") else "")
    if rule.get("contains") is not None:
        wanted = rule["contains"].casefold()
        if not any(wanted in text_of(m) for m in found):
            return [f"content: no {scope} contains {rule['contains']!r} ({len(found)} checked)"]
        return []
    unwanted = rule["not_contains"].casefold()
    bad = [m for m in found if unwanted in text_of(m)]
    if bad:
        days = ", ".join(f"{m.channel} on day {facts.day(m.sent_at)}" for m in bad[:6])
        return [f"content: {len(bad)} {scope} contain(s) {rule['not_contains']!r} ({days})"]
    return []


def text_of(message: OutboxMessage) -> str:
    return "\n".join(str(message.payload.get(name, "")) for name in TEXT_FIELDS).casefold()


def describe(facts: Facts, messages: list[OutboxMessage], *, limit: int = 6) -> str:
    shown = [f"{m.channel} on day {facts.day(m.sent_at)}" for m in messages[:limit]]
    return ", ".join(shown) + (", …" if len(messages) > limit else "")


def _label(kind: str | None) -> str:
    return {"chasing": "chasing message(s)", "acknowledgement": "acknowledgement(s)"}.get(kind or "any", "message(s)")
