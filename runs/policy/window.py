"""When a contact may be reached: business days, business hours and quiet hours.

All three are read in one time zone (`resolve_timezone`). A day's send window
is its business hours minus its quiet hours; quiet hours may wrap midnight
(20:00 → 08:00). Windows are turned into instants per local date, so a rule
is never applied twice in the fall-back hour: once a window has opened it
stays open until its end instant.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents.config import send_hours
from agents.config.schema_followup import BusinessHours, FollowupSpec
from runs.policy import public_holidays
from runs.policy.calendar import localize, require_aware

WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# The schema's defaults (agents.config), for a plan that leaves the field out.
DEFAULT_BUSINESS_DAYS = tuple(FollowupSpec.model_fields["business_days"].default)
DEFAULT_HOURS = BusinessHours()
MAX_DEFER = timedelta(days=60)
# Spreads wakes moved to a window opening over five minutes: thousands of runs must not fire in one second.
OFFSET_SPREAD_S = 300
# Every weekday recurs within a week (day 0 may already be past its windows, hence eight), plus room for
# a run of public holidays around a weekend (Christmas to New Year, Golden Week).
LOOKAHEAD_DAYS = 8 + 21


@dataclass(frozen=True)
class Hours:
    """The plan's send rules in minutes after local midnight."""

    weekdays: frozenset[int]
    open: int
    close: int
    quiet: tuple[tuple[int, int], ...]
    # A public holiday of the plan's calendars (runs.policy.public_holidays); None when it names none.
    closed: Callable[[date], bool] | None = None

    def is_business_day(self, day: date) -> bool:
        return day.weekday() in self.weekdays and not (self.closed and self.closed(day))


def resolve_timezone(plan: dict, *, contact_tz: str, org_tz: str) -> ZoneInfo:
    """The zone the plan's hours are read in; an empty or unknown name falls back to the next candidate, then UTC."""
    followup = plan.get("followup") or {}
    fixed = followup.get("timezone") or ""
    source = followup.get("timezone_source") or "contact"
    candidates = {
        "contact": (contact_tz, org_tz, fixed),
        "organization": (org_tz, fixed),
        "fixed": (fixed, org_tz),
    }.get(source, (contact_tz, org_tz, fixed))
    for name in candidates:
        if zone := _zone(name):
            return zone
    return ZoneInfo("UTC")


@functools.lru_cache(maxsize=4096)
def run_offset(run_id: int | str) -> timedelta:
    """A fixed 0–299 s offset per run, stable across processes (unlike hash()).

    `run_id` is the run's `offset_key`: its id, or a simulated run's stable reference.
    """
    digest = hashlib.sha256(f"lucia.policy.offset:{run_id}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % OFFSET_SPREAD_S)


def next_allowed_instant(plan: dict, *, at: datetime, tz: ZoneInfo, run_id: int) -> datetime:
    """`at` (in UTC) when sending is allowed then; else the next window's opening plus the run's offset."""
    at = require_aware(at, name="at")
    hours = read_hours(plan, tz=tz)
    first_day = at.astimezone(tz).date()
    for days in range(LOOKAHEAD_DAYS):
        day = first_day + timedelta(days=days)
        for start, end in _windows(hours, day, tz=tz):
            if at < start:
                return start + min(run_offset(run_id), (end - start) / 2)
            if at < end:
                return at
    raise ValueError("the plan leaves no time to send: business hours lie entirely inside quiet hours")


def check_send_window(plan: dict, *, contact_tz: str, org_tz: str, now: datetime, run_id: int) -> datetime | None:
    """None when a send may go out now; otherwise the instant it is deferred to (never dropped)."""
    tz = resolve_timezone(plan, contact_tz=contact_tz, org_tz=org_tz)
    now = require_aware(now, name="now")
    allowed = next_allowed_instant(plan, at=now, tz=tz, run_id=run_id)
    return None if allowed == now else allowed


def clamp_defer(plan: dict, *, requested: datetime, now: datetime, tz: ZoneInfo, run_id: int) -> datetime:
    """A requested contact time brought within [now, now + 60 days] and then into the send window."""
    requested = require_aware(requested, name="requested")
    now = require_aware(now, name="now")
    bounded = min(max(requested, now), now + MAX_DEFER)
    return next_allowed_instant(plan, at=bounded, tz=tz, run_id=run_id)


def read_hours(plan: dict, *, tz: ZoneInfo | None = None) -> Hours:
    """The plan's send rules; public holidays only with `tz` (the zone that says whose holidays they are)."""
    followup = plan.get("followup") or {}
    hours = followup.get("business_hours") or {}
    quiet = (plan.get("compliance") or {}).get("quiet_hours")
    return _hours(
        tuple(followup.get("business_days") or DEFAULT_BUSINESS_DAYS),
        hours.get("start") or DEFAULT_HOURS.start,
        hours.get("end") or DEFAULT_HOURS.end,
        (quiet["start"], quiet["end"]) if quiet else None,
        public_holidays.countries_for(plan, zone_name=tz.key) if tz is not None else None,
    )


# An episode reads the same plan's rules several times (ladder, cadence, the send window check), and every run of
# a plan reads the same ones: parsed once per set of rules. The same rules give the same Hours, so the windows
# cache below finds them.
@functools.lru_cache(maxsize=256)
def _hours(business_days: tuple, start: str, end: str, quiet: tuple[str, str] | None,
           countries: tuple[str, ...] | None) -> Hours:
    return Hours(
        weekdays=frozenset(_weekday(day) for day in business_days),
        open=send_hours.minutes(start),
        close=send_hours.minutes(end),
        quiet=send_hours.quiet_spans(quiet),
        closed=public_holidays.closed_on(countries) if countries else None,
    )


# A day's windows as instants cost a few zone conversions each; every wake of every run of a plan on that day
# asks for the same ones.
@functools.lru_cache(maxsize=4096)
def _windows(hours: Hours, day: date, *, tz: ZoneInfo) -> tuple[tuple[datetime, datetime], ...]:
    if not hours.is_business_day(day):
        return ()
    spans = send_hours.send_spans(hours.open, hours.close, hours.quiet)
    instants = [(_instant(day, start, tz=tz), _instant(day, end, tz=tz)) for start, end in spans]
    # A window lying wholly inside a DST gap has no instants.
    return tuple((start, end) for start, end in instants if start < end)


def _instant(day: date, minutes: int, *, tz: ZoneInfo) -> datetime:
    if minutes >= send_hours.DAY:
        return localize(day + timedelta(days=1), time(0, 0), tz=tz)
    return localize(day, time(minutes // 60, minutes % 60), tz=tz)


def _weekday(day: int | str) -> int:
    # The compiler emits 0..6; the source names are accepted too so a raw config cannot be misread.
    return WEEKDAY_NAMES.index(day) if isinstance(day, str) else int(day)


def _zone(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
