"""Recurring check-ins (the plan's `cadence`) on top of the follow-up ladder.

The ladder chases one unanswered message; a cadence starts a new check-in
every period. Periods are `every_s` long, anchored on the run's start (on the
`on` weekday at or before it, for weekly periods), and read in the policy's
time zone. A period's slot is `at` on its first day, moved to the next
business day when that day is a weekend or a public holiday, then into the
send window.

One check-in per period. A period is served by the check-in sent in it (the
start episode's first message is the first period's) or by a reply from the
contact in it: then the next check-in is the next period's slot, never "a
week after the reply" (that drifts). A reply that defers the next contact
(out of office, "call me in 3 days") serves nothing: the check-in comes when
the contact is back. Each check-in is ladder step 0 again,
and the ladder's later steps chase it, but only until the next check-in is
due: a chase due after it is dropped, as is the ladder's answer deadline.
After a reply nothing chases: the contact answered.

State (run.state["policy"]["cadence"]): `anchor` (first period's date),
`started_at`, `slot` (the pending check-in's instant, also `next_due_at` while
it is the pending wake), `served` (the latest served period's first date) and
`unanswered` (check-ins sent since the contact last wrote). When a check-in
makes `unanswered` reach `escalate_after`, its ladder runs to the end
uncapped and `followup.on_exhausted` applies, as for a run without a cadence.
Past `until`, no check-in is scheduled and the ladder alone decides.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from runs.policy import ladder
from runs.policy.calendar import localize, require_aware
from runs.policy.window import next_allowed_instant, read_hours, resolve_timezone

# A period whose days are all closed (a fortnight of holidays) still gets its check-in this far ahead, at most.
MAX_SLOT_SHIFT_DAYS = 31


def plan_next(
    plan: dict,
    *,
    state: dict,
    contact_tz: str,
    org_tz: str,
    now: datetime,
    event: str,
    run_id: int,
    task_key: str | None = None,
    defer_until: datetime | None = None,
    outreach_sent: bool = False,
) -> ladder.NextStep:
    """The ladder's next step, with the plan's cadence (if any) laid over it (see the module docstring)."""
    cadence = plan.get("cadence")
    arguments = dict(plan=plan, contact_tz=contact_tz, org_tz=org_tz, now=now, event=event, run_id=run_id,
                     task_key=task_key, defer_until=defer_until, outreach_sent=outreach_sent)
    if not cadence:
        return ladder.plan_next(state=state, **arguments)
    now = require_aware(now, name="now")
    tz = resolve_timezone(plan, contact_tz=contact_tz, org_tz=org_tz)
    full = {**ladder.initial_state(), **(state or {})}
    memo = dict(full.get("cadence") or {})
    if not memo.get("anchor"):
        memo.update(anchor=_anchor(cadence, now.astimezone(tz).date()).isoformat(), started_at=now.isoformat(),
                    unanswered=0, served=None, slot=None)
    reset: dict = {}
    checking_in = event == "followup" and memo.get("slot") and memo["slot"] == full["next_due_at"] \
        and now >= _parse(memo["slot"])
    if checking_in:  # this check-in is step 0 of a fresh chase
        reset = {"ladder_step": 0, "attempts": 0, "exhausted": False}
    step = ladder.plan_next(state={**full, **reset}, **arguments)
    period = _period_of(cadence, memo, now.astimezone(tz).date())
    if event == "reply" and defer_until is None:
        memo.update(served=period.isoformat(), unanswered=0)
    elif event == "reply":  # "away until the 12th" is no update: the check-in waits for their return
        memo.update(unanswered=0)
    elif outreach_sent and (checking_in or event == "start"):
        memo.update(served=period.isoformat(), unanswered=int(memo.get("unanswered") or 0) + 1)
    updates = {**reset, **step.state_updates}
    paused = _parse((full | updates).get("paused_until"))
    checkin = _next_checkin(plan, cadence, memo, now=now, tz=tz, run_id=run_id, not_before=paused)
    last_period = int(memo.get("unanswered") or 0) >= int(cadence.get("escalate_after") or 1)
    if checkin is None or step.action == "idle" or (last_period and event != "reply"):
        memo["slot"] = None
        return replace(step, state_updates={**updates, "cadence": memo})
    chase = step if step.action == "followup" and step.step is not None and event != "reply" else None
    if chase is not None and chase.due_at < checkin:
        memo["slot"] = None
        return replace(step, state_updates={**updates, "cadence": memo})
    memo["slot"] = checkin.isoformat()
    updates |= {"next_due_at": checkin.isoformat(), "exhausted": False, "cadence": memo}
    channel = ((plan.get("followup") or {}).get("ladder") or [{}])[0].get("channel")
    wake_when = f"followup:{task_key}" if task_key else step.wake_when
    reason = f"{step.reason}; next check-in {checkin.astimezone(tz):%a %Y-%m-%d %H:%M} on {channel}"
    return ladder.NextStep("followup", checkin, channel, 0, wake_when, updates, reason)


def is_last_chase(plan: dict, state: dict) -> bool:
    """Whether the current check-in's chase ends the cadence (its last step may say a human takes over)."""
    cadence = plan.get("cadence")
    if not cadence:
        return True
    memo = (state or {}).get("cadence") or {}
    return int(memo.get("unanswered") or 0) >= int(cadence.get("escalate_after") or 1)


def slot_for(plan: dict, period_start: date, *, tz: ZoneInfo, run_id: int) -> datetime:
    """The instant (UTC) of the check-in of the period starting on `period_start`: `at` on its first
    business day (weekends and public holidays skipped), inside the send window."""
    cadence = plan["cadence"]
    hours = read_hours(plan, tz=tz)
    day = period_start
    for _ in range(MAX_SLOT_SHIFT_DAYS):
        if hours.is_business_day(day):
            break
        day += timedelta(days=1)
    at = time.fromisoformat(cadence.get("at") or "09:00")
    return next_allowed_instant(plan, at=localize(day, at, tz=tz), tz=tz, run_id=run_id)


def _next_checkin(plan: dict, cadence: dict, memo: dict, *, now: datetime, tz: ZoneInfo, run_id: int,
                  not_before: datetime | None) -> datetime | None:
    """The next check-in: this period's slot when the period is not served yet, else the next period's;
    not before a contact's "not before"; None past `until`."""
    period = _period_of(cadence, memo, now.astimezone(tz).date())
    if memo.get("served") == period.isoformat():
        period += timedelta(seconds=int(cadence["every_s"]))
    due = max(slot_for(plan, period, tz=tz, run_id=run_id), now)
    if not_before is not None and due < not_before:
        due = next_allowed_instant(plan, at=not_before, tz=tz, run_id=run_id)
    due = next_allowed_instant(plan, at=due, tz=tz, run_id=run_id)
    ends = _until(cadence, memo, tz=tz)
    return None if ends is not None and due >= ends else due


def _anchor(cadence: dict, start: date) -> date:
    """The first period's first day: the `on` weekday at or before the run's start, else the start's date."""
    weekday = cadence.get("on")
    if weekday is None:
        return start
    return start - timedelta(days=(start.weekday() - int(weekday)) % 7)


def _period_of(cadence: dict, memo: dict, day: date) -> date:
    anchor = date.fromisoformat(memo["anchor"])
    days = int(cadence["every_s"]) // 86400
    return anchor + timedelta(days=((day - anchor).days // days) * days)


def _until(cadence: dict, memo: dict, *, tz: ZoneInfo) -> datetime | None:
    if cadence.get("until_date"):
        last = date.fromisoformat(cadence["until_date"])
        return localize(last + timedelta(days=1), time(0, 0), tz=tz)
    if cadence.get("until_s"):
        return _parse(memo["started_at"]) + timedelta(seconds=int(cadence["until_s"]))
    return None


def _parse(value: str | None) -> datetime | None:
    return None if not value else require_aware(datetime.fromisoformat(value), name="cadence state").astimezone(UTC)
