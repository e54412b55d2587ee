"""Promises: a contact's commitment with a date ("we will pay on the 15th"), kept in their memory.

A promise is recorded by the `record_promise` tool (any model calls it) as a
Contact.history entry, written through runs.contact_memory and journaled:

    {"kind": "promise", "task_key", "due": "YYYY-MM-DD", "what", "check_at": ISO, "episode_id", ...}

Chasing that task's contact pauses until `check_at`: the promised date plus
the plan's `followup.promise_grace` (default two business days), 09:00 in the
contact's zone, moved into the send window (runs.decisions holds every
follow-up until then). When an episode runs at or after `check_at` with the
task still open, `review` writes {"kind": "promise_broken", ...}; the model is
told (prompt metadata `promise`) and checks with the contact ("did it go
through?"), and the ladder resumes. A contact who breaks a second promise on
the same task goes to a human. A promise never completes a task: only the
task's `done_when` does, on evidence.

The latest promise on a task is the one that counts; a new one replaces an
earlier one not yet checked.
"""

from __future__ import annotations

from datetime import date, datetime, time
from zoneinfo import ZoneInfo

from runs import contact_memory, policy
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Contact, EpisodeKind, JournalKind
from runs.policy.calendar import add_delay
from runs.policy.window import read_hours

# Promises on one task a contact may break before the model is told to hand over to a human.
BROKEN_BEFORE_HUMAN = 2
DEFAULT_GRACE = {"delay_s": 0, "delay_business_days": 2}
# Local time a promise is checked on its check day (then moved into the send window).
CHECK_TIME = time(9, 0)


class PromiseError(ValueError):
    """The promise cannot be recorded as asked; str() says why, for the model to read."""


def record(ctx: EpisodeContext, *, task_key: str, due: str, what: str, quote: str,
           outcome: EpisodeOutcome) -> dict:
    """Record the promise (once per episode and task) and pause chasing until its check; returns the entry.

    Raises PromiseError for an unknown or finished task, an unreadable date or one already past.
    """
    spec = next((task for task in ctx.plan.get("tasks") or [] if task["key"] == task_key), None)
    if spec is None:
        raise PromiseError(f"no task {task_key!r} in this run")
    if task_key not in ctx.open_task_keys():
        raise PromiseError(f"task {task_key!r} is already done")
    contact = _contact_for(ctx, spec)
    if contact is None:
        raise PromiseError("this run has no contact to hold to a promise")
    tz = zone(ctx, contact)
    try:
        due_day = date.fromisoformat(due)
    except ValueError:
        raise PromiseError(f"due: {due!r} is not a date (YYYY-MM-DD)") from None
    if due_day < ctx.now.astimezone(tz).date():
        raise PromiseError(f"due: {due} has already passed in the contact's calendar ({tz.key})")
    check_at = check_time(ctx, due_day=due_day, tz=tz)
    with ctx.fence():
        locked = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        entry = next((e for e in locked.history or [] if e.get("kind") == "promise"
                      and e.get("episode_id") == ctx.episode.pk and e.get("task_key") == task_key), None)
        if entry is None:
            entry = contact_memory.remember(
                locked, kind="promise", at=ctx.now, by={"contact": contact.role, "via": "record_promise"},
                why=quote[:500], task_key=task_key, due=due_day.isoformat(), what=what[:200],
                check_at=check_at.isoformat(), episode_id=ctx.episode.pk,
            )
    contact.history = locked.history
    ctx.journal(JournalKind.NOTE, {"runtime": True, "promise": "recorded", "contact": contact.role,
                                   "task_key": task_key, "due": entry["due"], "check_at": entry["check_at"]})
    ctx.flush()
    outcome.followup_override = datetime.fromisoformat(entry["check_at"])
    return entry


def review(ctx: EpisodeContext) -> list[dict]:
    """Before a follow-up's model call: every promise whose check time has come with its task still open is
    broken; returns the `promise_broken` entries written (a re-executed episode finds its own and adds none)."""
    if ctx.episode.kind not in (EpisodeKind.FOLLOWUP, EpisodeKind.START):
        return []
    open_keys = ctx.open_task_keys()
    written = []
    for contact in ctx.contacts:
        due = [p for p in active(contact.history) if p["task_key"] in open_keys
               and datetime.fromisoformat(p["check_at"]) <= ctx.now]
        if due:
            written += _break(ctx, contact, due)
    ctx.flush()
    return written


def _break(ctx: EpisodeContext, contact: Contact, due: list[dict]) -> list[dict]:
    with ctx.fence():
        locked = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        entries = [contact_memory.remember(
            locked, kind="promise_broken", at=ctx.now, by={"runtime": "promise_check"},
            why=f"nothing arrived by {promise['check_at']} for the promise of {promise['due']}",
            task_key=promise["task_key"], due=promise["due"], what=promise.get("what", ""), episode_id=ctx.episode.pk,
        ) for promise in active(locked.history) if promise in due]
    contact.history = locked.history
    for entry in entries:
        ctx.journal(JournalKind.NOTE, {"runtime": True, "promise": "broken", "contact": contact.role,
                                       "task_key": entry["task_key"], "due": entry["due"],
                                       "broken_so_far": broken_count(contact.history, task_key=entry["task_key"])})
    return entries


def active(history: list[dict] | None) -> list[dict]:
    """The latest promise per task that has not been found broken since it was made."""
    latest: dict[str, dict] = {}
    for entry in history or []:
        if entry.get("kind") == "promise":
            latest[entry.get("task_key", "")] = entry
        elif entry.get("kind") == "promise_broken":
            latest.pop(entry.get("task_key", ""), None)
    return list(latest.values())


def broken_count(history: list[dict] | None, *, task_key: str) -> int:
    return sum(1 for e in history or [] if e.get("kind") == "promise_broken" and e.get("task_key") == task_key)


def chase_after(history: list[dict] | None, *, open_keys: set[str]) -> datetime | None:
    """The latest check time of the contact's active promises on open tasks: no chasing before it (None: none)."""
    checks = [datetime.fromisoformat(p["check_at"]) for p in active(history) if p.get("task_key") in open_keys]
    return max(checks, default=None)


def for_prompt(contacts: list[Contact], *, episode_id: int) -> dict | None:
    """What the model is told about promises in this episode: the one found broken now (with how many that
    contact broke on the task, `broken_now`), else the latest active one; None when there is none."""
    for contact in contacts:
        history = contact.history or []
        broken = [e for e in history if e.get("kind") == "promise_broken" and e.get("episode_id") == episode_id]
        if broken:
            last = broken[-1]
            return {"contact_role": contact.role, "task_key": last["task_key"], "due": last["due"],
                    "what": last.get("what", ""), "broken_now": True,
                    "broken_count": broken_count(history, task_key=last["task_key"])}
    for contact in contacts:
        # As the run stood when the episode began: a promise this episode records would change a replayed request.
        pending = active([e for e in contact.history or []
                          if not (e.get("kind") == "promise" and e.get("episode_id") == episode_id)])
        if pending:
            last = pending[-1]
            return {"contact_role": contact.role, "task_key": last["task_key"], "due": last["due"],
                    "what": last.get("what", ""), "check_at": last["check_at"], "broken_now": False,
                    "broken_count": broken_count(contact.history, task_key=last["task_key"])}
    return None


def check_time(ctx: EpisodeContext, *, due_day: date, tz: ZoneInfo) -> datetime:
    """When a promise due on `due_day` is checked: the day plus the plan's grace, 09:00 local, in the window."""
    grace = (ctx.plan.get("followup") or {}).get("promise_grace") or DEFAULT_GRACE
    start = datetime.combine(due_day, CHECK_TIME, tzinfo=tz)
    at = add_delay(start, seconds=int(grace.get("delay_s") or 0),
                   business_days=int(grace.get("delay_business_days") or 0), tz=tz,
                   weekdays=sorted(read_hours(ctx.plan).weekdays))
    return policy.clamp_defer(ctx.plan, requested=at, now=ctx.now, tz=tz, run_id=ctx.run.offset_key)


def zone(ctx: EpisodeContext, contact: Contact) -> ZoneInfo:
    return policy.resolve_timezone(ctx.plan, contact_tz=contact.timezone,
                                   org_tz=ctx.run.organization.default_timezone)


def _contact_for(ctx: EpisodeContext, spec: dict) -> Contact | None:
    role = spec.get("contact_role")
    return next((c for c in ctx.contacts if c.role == role), None) or (ctx.contacts[0] if ctx.contacts else None)
