"""Absences: a contact away until a date ("out until the 10th", "not available for 2 weeks"), in their memory.

The `record_absence` tool (any model calls it) writes an "absence" entry to
Contact.history through runs.contact_memory, journaled. From then on nothing
goes out to that contact before the return: the ToolExecutor's policy check
holds sends until then (runs.compliance) and follow-ups are not scheduled
before it (runs.decisions), both through runs.policy.memory.absent_until. The
episode's next contact moves to the return as well, so the ladder does not
spend a step on someone who is away.

A bare date is the start of the contact's working day (09:00 in their zone):
"until the 10th" means nothing before the 10th. A contact who writes back
before the date is back: `learn_return` ends the absence (an auto-reply does not
come back while nothing is sent to them, and a new out-of-office reply records
a new absence).
"""

from __future__ import annotations

from datetime import date, datetime

from runs import contact_memory, policy, senders
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Contact, EpisodeKind, JournalKind
from runs.policy import memory
from runs.promises import CHECK_TIME, zone


class AbsenceError(ValueError):
    """The absence cannot be recorded as asked; str() says why, for the model to read."""


def record(ctx: EpisodeContext, *, role: str, until: str, reason: str, outcome: EpisodeOutcome) -> dict:
    """Record that the contact with `role` is away until `until` (once per episode); returns the entry.

    The return is brought within the policy's bounds (at most 60 days ahead, inside the send window).
    Raises AbsenceError for an unknown role, an unreadable time or one already past.
    """
    contact = next((c for c in ctx.contacts if c.role == role), None)
    if contact is None:
        raise AbsenceError(f"this run has no contact with role {role!r}")
    tz = zone(ctx, contact)
    back = _parse(until, tz=tz)
    if back <= ctx.now:
        raise AbsenceError(f"until: {until} has already passed")
    back = policy.clamp_defer(ctx.plan, requested=back, now=ctx.now, tz=tz, run_id=ctx.run.offset_key)
    with ctx.fence():
        locked = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        entry = next((e for e in locked.history or [] if e.get("kind") == "absence"
                      and e.get("episode_id") == ctx.episode.pk), None)
        if entry is None:
            entry = contact_memory.remember(locked, kind="absence", at=ctx.now,
                                            by={"contact": role, "via": "record_absence"}, why=reason[:500],
                                            until=back.isoformat(), episode_id=ctx.episode.pk)
    contact.history = locked.history
    ctx.journal(JournalKind.NOTE, {"runtime": True, "absence": "recorded", "contact": role, "until": entry["until"]})
    ctx.flush()
    outcome.followup_override = datetime.fromisoformat(entry["until"])
    return entry


def learn_return(ctx: EpisodeContext) -> dict | None:
    """On a reply from a contact recorded as away by an earlier episode: they are back (a "returned" entry,
    journaled). Returns the entry, or None."""
    payload = ctx.episode.payload or {}
    if ctx.episode.kind not in (EpisodeKind.INBOUND, EpisodeKind.CALL_REPORT):
        return None
    roles = senders.roles_of(ctx.contacts, sender=str(payload.get("from") or ""), channel=payload.get("channel") or "")
    contact = next((c for c in ctx.contacts if c.role in roles), None)
    if contact is None or memory.absent_until(contact.history, now=ctx.now) is None:
        return None
    with ctx.fence():
        locked = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        if memory.absent_until(locked.history, now=ctx.now) is None:
            return None
        entry = contact_memory.remember(locked, kind="returned", at=ctx.now, by={"contact": contact.role},
                                        why="the contact wrote back before the return date",
                                        episode_id=ctx.episode.pk)
    contact.history = locked.history
    ctx.journal(JournalKind.NOTE, {"runtime": True, "absence": "ended", "contact": contact.role})
    ctx.flush()
    return entry


def _parse(value: str, *, tz) -> datetime:
    try:
        if len(value.strip()) == 10:
            return datetime.combine(date.fromisoformat(value.strip()), CHECK_TIME, tzinfo=tz)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise AbsenceError(f"until: {value!r} is not a date (YYYY-MM-DD) or an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=tz)
