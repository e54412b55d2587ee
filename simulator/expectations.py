"""Check a finished simulated run against its eval case's `expect` (agents/config/schema_evals.py Expect).

`run_facts.gather` reads the run once (simulator.run_facts); `check` returns one reason per unmet
expectation (empty: the case passed). Days count from the run's start as
calendar dates in the start's zone (the organization's): day 0 is the start
date, so "day 9" is the same date for the builder reading the timeline and for
the check. Counts, periods, quiet periods and content are in
simulator.message_checks; escalation counts and timing in
simulator.escalation_checks.

A policy violation is a message that actually went out against the plan's
compliance rules: outside the send window (business days and hours, quiet
hours) in the contact's zone, to an address that had opted out, above a
per-contact cap (rolling day and week, like the runtime's), to an address that
is not a run contact, with a forbidden phrase, or without the channel's
required opt-out text. A send the runtime held back (a `policy_block` journal
entry: deferred or blocked) is the policy working, not a violation.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from runs import policy
from runs.models import OutboxMessage, TaskStatus
from runs.policy.window import read_hours
from simulator import escalation_checks, message_checks
from simulator.message_checks import describe
from simulator.run_facts import Facts

__all__ = ["check", "describe", "duplicate_sends", "policy_violations", "quiet_hour_sends"]

TEXT_FIELDS = message_checks.TEXT_FIELDS
OPT_OUT_TOOLS = {"send_email": "body", "send_sms": "body", "send_slack": "text"}
CAPS = (("per_day", timedelta(days=1)), ("per_week", timedelta(days=7)))


def check(expect: dict, facts: Facts) -> list[str]:
    """One reason per unmet expectation, in the order of the Expect schema."""
    reasons: list[str] = []
    required = [t for t in facts.tasks if t.required]
    by_day = expect.get("tasks_done_by_day")
    if by_day is not None:
        for task in required:
            if task.status != TaskStatus.DONE:
                reasons.append(f"tasks_done_by_day: {task.key} was not done by day {by_day} (still {task.status})")
            elif facts.day(task.done_at) > by_day:
                reasons.append(f"tasks_done_by_day: {task.key} was not done by day {by_day} "
                               f"(done on day {facts.day(task.done_at)})")
    early = expect.get("not_done_before_day")
    if early is not None:
        for task in required:
            if task.status == TaskStatus.DONE and task.done_at and facts.day(task.done_at) < early:
                reasons.append(f"not_done_before_day: {task.key} was done on day {facts.day(task.done_at)}, "
                               f"before day {early}")
    all_done = bool(required) and all(t.status == TaskStatus.DONE for t in required)
    if expect.get("tasks_done") is True and not all_done:
        still = ", ".join(t.key for t in required if t.status != TaskStatus.DONE)
        reasons.append(f"tasks_done: expected every required task done; still open: {still}")
    if expect.get("tasks_done") is False and all_done:
        reasons.append("tasks_done: expected a required task to stay open, but all are done")
    status_of = {t.key: t.status for t in facts.tasks}
    for key in expect.get("open_tasks") or []:
        if status_of.get(key) != TaskStatus.OPEN:
            reasons.append(f"open_tasks: {key} was expected to stay open but is {status_of.get(key, 'missing')}")
    messages = len(facts.sent)
    if expect.get("min_messages") is not None and messages < expect["min_messages"]:
        reasons.append(f"min_messages: {messages} message(s) sent, expected at least {expect['min_messages']}")
    if expect.get("max_messages") is not None and messages > expect["max_messages"]:
        reasons.append(f"max_messages: {messages} message(s) sent, expected at most {expect['max_messages']}"
                       f" ({describe(facts, facts.sent)})")
    escalated = expect.get("escalated")
    if escalated is True and not facts.escalations:
        reasons.append("escalated: expected an escalation, none was raised")
    if escalated is False and facts.escalations:
        kinds = ", ".join(f"{e.kind} on day {facts.day(e.raised_at or facts.start)}" for e in facts.escalations)
        reasons.append(f"escalated: expected no escalation, got {len(facts.escalations)} ({kinds})")
    reasons += escalation_checks.check(expect, facts)
    reasons += message_checks.check(expect, facts)
    if expect.get("suppressed") is not None and bool(facts.suppressed) != expect["suppressed"]:
        reasons.append("suppressed: expected a contact address to be suppressed, none is" if expect["suppressed"]
                       else f"suppressed: expected no suppression, got {sorted(a for _, a in facts.suppressed)}")
    final = expect.get("final_status")
    if final and facts.run.status != final:
        reasons.append(f"final_status: the run is {facts.run.status}, expected {final}")
    used = {m.channel for m in facts.sent}
    for channel in expect.get("uses_channels") or []:
        if channel not in used:
            reasons.append(f"uses_channels: nothing was sent by {channel} (used: {', '.join(sorted(used)) or 'none'})")
    window = expect.get("no_messages_between_days")
    if window:
        inside = [m for m in facts.sent if window[0] <= facts.day(m.sent_at) <= window[1]]
        if inside:
            reasons.append(f"no_messages_between_days: {len(inside)} message(s) sent on days {window[0]}..{window[1]}"
                           f" ({describe(facts, inside)})")
    if expect.get("no_quiet_hours", True) and (quiet := quiet_hour_sends(facts)):
        reasons.append(f"no_quiet_hours: {len(quiet)} message(s) sent in quiet hours ({describe(facts, quiet)})")
    if expect.get("no_duplicate_sends", True):
        reasons += [f"no_duplicate_sends: {problem}" for problem in duplicate_sends(facts)]
    if expect.get("no_policy_violations", True):
        reasons += [f"no_policy_violations: {problem}" for problem in policy_violations(facts)]
    return reasons


def quiet_hour_sends(facts: Facts) -> list[OutboxMessage]:
    quiet = read_hours(facts.run.plan).quiet
    found = []
    for message in facts.sent:
        local = message.sent_at.astimezone(_zone(facts, message))
        minute = local.hour * 60 + local.minute
        if any(start <= minute < end for start, end in quiet):
            found.append(message)
    return found


def duplicate_sends(facts: Facts) -> list[str]:
    """The same payload to the same recipient twice in one episode, or one key stored twice at the sandbox."""
    seen = Counter((m.episode_id, m.channel, m.recipient, json.dumps(m.payload, sort_keys=True)) for m in facts.sent)
    problems = [f"{n} identical {channel} messages to {recipient} in one episode"
                for (_, channel, recipient, _), n in seen.items() if n > 1]
    problems += [f"idempotency key {key[:12]}… was sent {n} times" for key, n in facts.sandbox_keys.items() if n > 1]
    return problems


def policy_violations(facts: Facts) -> list[str]:
    plan, run = facts.run.plan, facts.run
    rules = plan.get("compliance") or {}
    problems = []
    for message in facts.sent:
        contact = facts.contact_for(message)
        where = f"{message.channel} to {message.recipient} on day {facts.day(message.sent_at)}"
        if contact is None:
            problems.append(f"{where}: not an address of a run contact")
            continue
        tz = _zone(facts, message)
        if policy.next_allowed_instant(plan, at=message.sent_at, tz=tz, run_id=run.pk) != message.sent_at:
            local = message.sent_at.astimezone(tz)
            problems.append(f"{where} at {local:%a %H:%M} {tz.key}: outside the send window")
        since = facts.suppressed.get((message.channel, message.recipient))
        if since is not None and message.sent_at >= since:
            problems.append(f"{where}: the address had opted out or bounced")
        text = "\n".join(str(message.payload.get(name, "")) for name in TEXT_FIELDS).casefold()
        phrases = [p for p in rules.get("forbidden_phrases") or [] if p.strip() and p.casefold() in text]
        if phrases:
            problems.append(f"{where}: contains forbidden phrase(s) {', '.join(map(repr, phrases))}")
        opt_out = (rules.get("opt_out_text") or {}).get(message.channel)
        field = OPT_OUT_TOOLS.get(message.tool)
        if opt_out and field and opt_out.casefold() not in str(message.payload.get(field, "")).casefold():
            problems.append(f"{where}: the required opt-out text is missing")
    return problems + _cap_breaches(facts, rules.get("per_contact_caps") or {})


def _cap_breaches(facts: Facts, caps: dict) -> list[str]:
    problems = []
    # Keyed by address alone, as the runtime counts them: an SMS and a call to one number share the caps.
    by_recipient: dict[str, list[datetime]] = {}
    for message in facts.sent:
        by_recipient.setdefault(message.recipient, []).append(message.sent_at)
    for recipient, times in by_recipient.items():
        for name, span in CAPS:
            limit = caps.get(name)
            worst = max((sum(1 for t in times if at - span < t <= at) for at in times), default=0)
            if limit and worst > limit:
                problems.append(f"to {recipient}: {worst} messages within {span.days} day(s), "
                                f"above the {name} cap of {limit}")
    return problems


def _zone(facts: Facts, message: OutboxMessage) -> ZoneInfo:
    contact = facts.contact_for(message)
    return policy.resolve_timezone(facts.run.plan, contact_tz=contact.timezone if contact else "",
                                   org_tz=facts.run.organization.default_timezone)
