"""Plans, times and a policy stepper shared by the policy tests (no database)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from runs import policy

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
RUN = 42
OFFSET = policy.run_offset(RUN)
DAY = 86400
QUIET = {"start": "20:00", "end": "08:00"}


def make_plan(*, quiet: dict | None = QUIET, hours: tuple[str, str] = ("09:00", "17:00"), **followup) -> dict:
    """Email now, email 2 business days later, SMS 3 calendar days later; 20:00–08:00 quiet by default."""
    ladder = [
        {"step": 0, "channel": "email", "delay_s": 0, "delay_business_days": 0},
        {"step": 1, "channel": "email", "delay_s": 0, "delay_business_days": 2},
        {"step": 2, "channel": "sms", "delay_s": 3 * DAY, "delay_business_days": 0},
    ]
    base = {
        "timezone_source": "contact",
        "timezone": None,
        "business_days": [0, 1, 2, 3, 4],
        "business_hours": {"start": hours[0], "end": hours[1]},
        "ladder": ladder,
        "max_attempts": 3,
        "on_exhausted": "escalate",
        "on_reply": "pause",
        "reply_grace_s": DAY,
    }
    return {
        "tasks": [{"key": "w9", "title": "W-9", "contact_role": "vendor", "required": True}],
        "followup": base | followup,
        "compliance": {"quiet_hours": quiet},
    }


def always_open(quiet: dict | None, **followup) -> dict:
    """Every day, all day, except the given quiet hours: isolates quiet-hour and DST behaviour."""
    return make_plan(quiet=quiet, hours=("00:00", "23:59"), business_days=[0, 1, 2, 3, 4, 5, 6], **followup)


def at(tz: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=tz, fold=fold)


def step(plan: dict, state: dict, now: datetime, event: str, **kwargs) -> tuple[policy.NextStep, dict]:
    """Run the policy and merge its updates, as the caller does."""
    result = policy.plan_next(
        plan, state=state, contact_tz="America/New_York", org_tz="UTC", now=now, event=event, run_id=RUN, **kwargs
    )
    return result, state | result.state_updates
