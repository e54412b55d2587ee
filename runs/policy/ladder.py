"""The follow-up ladder: what the runtime schedules after each episode.

See the package docstring (`runs.policy`) for the semantics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from runs.policy.calendar import add_delay, require_aware
from runs.policy.window import clamp_defer, next_allowed_instant, read_hours, resolve_timezone

EVENTS = ("start", "followup", "reply", "human_answer", "event")
EXHAUSTED_ACTIONS = {"escalate": "escalate", "fail": "fail", "complete_quietly": "complete"}
DEFAULT_REPLY_GRACE_S = 2 * 86400


@dataclass(frozen=True)
class NextStep:
    """What the caller applies after an episode.

    action "followup" (and only it) carries `due_at`: schedule one follow-up episode then (payload
    step/channel; step None = the answer deadline after the last step, nothing to send) and cancel any
    other queued one. `state_updates` merge into
    run.state["policy"] (JSON-ready: datetimes are ISO strings).
    """

    action: str
    due_at: datetime | None = None
    channel: str | None = None
    step: int | None = None
    wake_when: str | None = None
    state_updates: dict = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class _Context:
    plan: dict
    state: dict
    tz: ZoneInfo
    now: datetime
    run_id: int
    task_key: str


def initial_state() -> dict:
    return {
        "ladder_step": 0,
        "attempts": 0,
        "last_outreach_at": None,
        "exhausted": False,
        "paused_until": None,
        "next_due_at": None,
    }


def cancels_pending_followup(event: str) -> bool:
    """Whether recording this event cancels a queued follow-up before the event's episode runs."""
    return event == "reply"


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
) -> NextStep:
    """The next wake after an episode of kind `event` ran at `now` (see the package docstring)."""
    now = require_aware(now, name="now")  # UTC: wall-clock arithmetic on a ZoneInfo datetime is wrong across DST
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    ctx = _Context(
        plan=plan,
        state={**initial_state(), **(state or {})},
        tz=resolve_timezone(plan, contact_tz=contact_tz, org_tz=org_tz),
        now=now,
        run_id=run_id,
        task_key=task_key or _default_task_key(plan),
    )
    handler = {"start": _on_start, "followup": _on_followup, "reply": _on_reply}.get(event, _on_other)
    return handler(ctx, defer_until=defer_until, outreach_sent=outreach_sent)


def _on_start(ctx: _Context, *, defer_until: datetime | None, outreach_sent: bool) -> NextStep:
    if outreach_sent:  # the start episode itself reached out: that was step 0
        return _fire(ctx, sent=True, defer_until=defer_until)
    due = _rung_due(ctx, base=ctx.now, step=ctx.state["ladder_step"])
    return _schedule(ctx, {}, due=due, reason="run started", defer_until=defer_until)


def _on_followup(ctx: _Context, *, defer_until: datetime | None, outreach_sent: bool) -> NextStep:
    state = ctx.state
    if state["exhausted"]:
        return _idle("ladder already spent")
    pending = _parse(state["next_due_at"])
    if pending is None or ctx.now < pending:
        # A wake the caller failed to cancel (a reply moved the schedule): it changes nothing.
        return _current(ctx, {}, reason="stale follow-up wake ignored")
    if state["ladder_step"] >= _max_steps(ctx.plan):
        if defer_until is not None:
            return _schedule(ctx, {}, due=ctx.now, reason="answer deadline", defer_until=defer_until)
        return _exhaust(ctx)
    if not outreach_sent and next_allowed_instant(ctx.plan, at=ctx.now, tz=ctx.tz, run_id=ctx.run_id) != ctx.now:
        # Fired late into a closed window (a worker outage): retry the same step, it was not a chance to send.
        return _schedule(ctx, {}, due=ctx.now, reason="step fell outside the send window", defer_until=defer_until)
    return _fire(ctx, sent=outreach_sent, defer_until=defer_until)


def _on_reply(ctx: _Context, *, defer_until: datetime | None, outreach_sent: bool) -> NextStep:
    mode = _followup(ctx.plan).get("on_reply") or "pause"
    resume_at = ctx.now + timedelta(seconds=_reply_grace_s(ctx.plan))
    # The contact is active again: an earlier "not before" no longer holds unless this reply sets a new one.
    updates: dict = {"paused_until": None}
    if outreach_sent:
        updates["last_outreach_at"] = _iso(ctx.now)
    if mode == "restart":
        updates |= {"ladder_step": 0, "attempts": 0, "exhausted": False}
        due = _rung_due(ctx, base=resume_at, step=0)
        return _schedule(ctx, updates, due=due, reason="reply: ladder restarts at step 0", defer_until=defer_until)
    if ctx.state["exhausted"]:
        return _idle("reply after the ladder was spent: a human has it", updates)
    if mode == "pause":
        return _schedule(ctx, updates, due=resume_at, reason="reply: ladder paused", defer_until=defer_until)
    if defer_until is not None:  # an explicit reschedule wins over on_reply=stop
        return _schedule(ctx, updates, due=ctx.now, reason="reply", defer_until=defer_until)
    return _wait(ctx, updates | {"next_due_at": None}, reason="reply: on_reply=stop, no further chasing")


def _on_other(ctx: _Context, *, defer_until: datetime | None, outreach_sent: bool) -> NextStep:
    """A human answer or an API event: the schedule stands unless the episode reached out or deferred."""
    if ctx.state["exhausted"]:
        return _idle("ladder already spent")
    chasing = ctx.state["next_due_at"] is not None
    updates = {"last_outreach_at": _iso(ctx.now)} if outreach_sent else {}
    if defer_until is not None:
        return _schedule(ctx, updates, due=ctx.now, reason="rescheduled", defer_until=defer_until)
    if outreach_sent and chasing:  # silence after this message is what the next step answers
        due = _rung_due(ctx, base=ctx.now, step=ctx.state["ladder_step"])
        return _schedule(ctx, updates, due=due, reason="outreach re-armed the answer deadline")
    return _current(ctx, updates, reason="schedule unchanged")


def _fire(ctx: _Context, *, sent: bool, defer_until: datetime | None) -> NextStep:
    """Count the step that just ran and arm the next one (or the final answer deadline)."""
    step = ctx.state["ladder_step"]
    updates = {"ladder_step": step + 1, "attempts": ctx.state["attempts"] + int(sent)}
    if sent:
        updates["last_outreach_at"] = _iso(ctx.now)
    due = _rung_due(ctx, base=ctx.now, step=step + 1)
    reason = f"step {step} {'sent' if sent else 'ran without a send'}"
    return _schedule(ctx, updates, due=due, reason=reason, defer_until=defer_until)


def _schedule(
    ctx: _Context, updates: dict, *, due: datetime, reason: str, defer_until: datetime | None = None
) -> NextStep:
    """Arm the pending step at `due` (not before paused_until, inside the send window); a defer replaces `due`."""
    state = ctx.state | updates
    updates = dict(updates)
    step = state["ladder_step"]
    if defer_until is not None:
        due = clamp_defer(ctx.plan, requested=defer_until, now=ctx.now, tz=ctx.tz, run_id=ctx.run_id)
        updates["paused_until"] = _iso(due)
        reason = f"{reason}; next contact deferred"
        if step >= _max_steps(ctx.plan):  # no contact left: the last message gets its full answer window
            due = _final_deadline(ctx, base=due)
    elif (floor := _parse(state["paused_until"])) and due < floor:
        due = floor
    due = next_allowed_instant(ctx.plan, at=due, tz=ctx.tz, run_id=ctx.run_id)
    updates["next_due_at"] = _iso(due)
    wake_when = f"followup:{ctx.task_key}"
    if step >= _max_steps(ctx.plan):  # still "followup" so every caller schedules it: silence must be noticed
        return NextStep("followup", due, None, None, wake_when, updates, f"{reason}; answer deadline, nothing to send")
    channel = _rung(ctx.plan, step).get("channel")
    return NextStep("followup", due, channel, step, wake_when, updates, f"{reason}; step {step} on {channel}")


def _current(ctx: _Context, updates: dict, *, reason: str) -> NextStep:
    """Re-issue the pending wake (a missed one becomes due now), or keep waiting when nothing is pending."""
    pending = _parse(ctx.state["next_due_at"])
    if pending is None:
        return _wait(ctx, updates, reason=reason)
    return _schedule(ctx, updates, due=max(pending, ctx.now), reason=reason)


def _wait(ctx: _Context, updates: dict, *, reason: str) -> NextStep:
    channel = _rung(ctx.plan, max(ctx.state["ladder_step"] - 1, 0)).get("channel")
    return NextStep("wait_reply", None, None, None, f"reply:{channel}", updates, reason)


def _exhaust(ctx: _Context) -> NextStep:
    outcome = _followup(ctx.plan).get("on_exhausted") or "escalate"
    updates = {"exhausted": True, "next_due_at": None}
    steps, sent = ctx.state["ladder_step"], ctx.state["attempts"]
    reason = f"no answer after {steps} steps ({sent} sent): on_exhausted={outcome}"
    return NextStep(EXHAUSTED_ACTIONS[outcome], None, None, None, None, updates, reason)


def _idle(reason: str, updates: dict | None = None) -> NextStep:
    return NextStep("idle", None, None, None, None, dict(updates or {}), reason)


def _rung_due(ctx: _Context, *, base: datetime, step: int) -> datetime:
    """When `step` fires counted from `base`; past the last step, when the answer deadline passes."""
    if step >= _max_steps(ctx.plan):
        return _final_deadline(ctx, base=base)
    return _after_delay(ctx, base=base, rung=_rung(ctx.plan, step))


def _final_deadline(ctx: _Context, *, base: datetime) -> datetime:
    """The last outreach gets the last rung's spacing to be answered; reply_grace when that spacing is zero."""
    ladder = _ladder(ctx.plan)
    last = _rung(ctx.plan, _max_steps(ctx.plan) - 1) if ladder else {}
    if last.get("delay_s") or last.get("delay_business_days"):
        return _after_delay(ctx, base=base, rung=last)
    return base + timedelta(seconds=_reply_grace_s(ctx.plan))


def _after_delay(ctx: _Context, *, base: datetime, rung: dict) -> datetime:
    hours = read_hours(ctx.plan, tz=ctx.tz)
    return add_delay(
        base,
        seconds=int(rung.get("delay_s") or 0),
        business_days=int(rung.get("delay_business_days") or 0),
        tz=ctx.tz,
        weekdays=sorted(hours.weekdays),
        closed=hours.closed,
    )


def _followup(plan: dict) -> dict:
    return plan.get("followup") or {}


def _ladder(plan: dict) -> list[dict]:
    return list(_followup(plan).get("ladder") or [])


def _rung(plan: dict, step: int) -> dict:
    """Steps past the end of the ladder (max_attempts > len) repeat its last rung."""
    ladder = _ladder(plan)
    return ladder[min(step, len(ladder) - 1)] if ladder else {}


def _max_steps(plan: dict) -> int:
    limit = _followup(plan).get("max_attempts")
    return len(_ladder(plan)) if limit is None else int(limit)


def _reply_grace_s(plan: dict) -> int:
    grace = _followup(plan).get("reply_grace_s")
    return DEFAULT_REPLY_GRACE_S if grace is None else int(grace)


def _default_task_key(plan: dict) -> str:
    tasks = plan.get("tasks") or []
    required = [task["key"] for task in tasks if task.get("required", True)]
    return (required or [task["key"] for task in tasks] or ["run"])[0]


def _iso(value: datetime) -> str:
    return value.isoformat()


def _parse(value: str | datetime | None) -> datetime | None:
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return require_aware(parsed, name="policy state datetime")
