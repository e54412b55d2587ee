"""Wall-clock arithmetic in a time zone, correct across DST transitions.

People mean wall time: "3 days later" and "next business day" keep the local
time of day even when a DST change falls in between. A wall time that does
not exist (the spring-forward gap) maps to the transition instant, the first
moment at or after it; an ambiguous one (the fall-back fold) maps to its
first occurrence.

Results are UTC: Python compares and subtracts datetimes sharing a ZoneInfo
by wall time (wrong across DST) and never equates an ambiguous local time
with another zone's, so instants are kept in UTC and only read locally.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

DAY_SECONDS = 86400


def require_aware(value: datetime, *, name: str) -> datetime:
    """`value` in UTC. Naive datetimes have no instant; accepting one would silently read it as server time."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {value!r}")
    return value.astimezone(UTC)


def localize(day: date, clock: time, *, tz: ZoneInfo) -> datetime:
    """The first instant (UTC) whose wall time in `tz` reads `clock` on `day`; in a gap, the gap's end."""
    naive = datetime.combine(day, clock)
    early = naive.replace(tzinfo=tz, fold=0)
    if _exists(early, tz=tz):
        return early.astimezone(UTC)
    # PEP 495 gap: fold=1 reads it with the new offset (an instant before the jump), fold=0 with the old one (after).
    before = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return _transition(before, early.astimezone(UTC), tz=tz)


def add_days(at: datetime, days: int, *, tz: ZoneInfo) -> datetime:
    """`days` calendar days later at the same local wall time."""
    local = at.astimezone(tz)
    return localize(local.date() + timedelta(days=days), local.time(), tz=tz)


def add_business_days(
    at: datetime, days: int, *, tz: ZoneInfo, business_days: list[int], closed: Callable[[date], bool] | None = None
) -> datetime:
    """The `days`-th business day after `at`'s local date, at the same local wall time.

    Counting starts with the next day, so Friday 16:00 + 1 is Monday 16:00 and
    Saturday 10:00 + 1 is Monday 10:00. Zero returns `at` unchanged. Days
    `closed` says are closed (public holidays) do not count.
    """
    at = require_aware(at, name="at")
    if days < 0:
        raise ValueError("days must not be negative")
    if days == 0:
        return at.astimezone(UTC)
    weekdays = {int(day) for day in business_days}
    if not weekdays:
        raise ValueError("business_days is empty: no day would ever count")
    local = at.astimezone(tz)
    day, left = local.date(), days
    while left:
        day += timedelta(days=1)
        left -= day.weekday() in weekdays and not (closed and closed(day))
    return localize(day, local.time(), tz=tz)


def add_delay(
    at: datetime, *, seconds: int, business_days: int, tz: ZoneInfo, weekdays: list[int],
    closed: Callable[[date], bool] | None = None,
) -> datetime:
    """Business days first, then whole days of `seconds` by the wall clock, then the rest as elapsed time.

    So "3d" keeps the time of day across DST while "12h" is twelve real hours.
    """
    moved = add_business_days(at, business_days, tz=tz, business_days=weekdays, closed=closed) if business_days else at
    whole_days, rest = divmod(seconds, DAY_SECONDS)
    if whole_days:
        moved = add_days(moved, whole_days, tz=tz)
    return moved.astimezone(UTC) + timedelta(seconds=rest)


def _exists(aware: datetime, *, tz: ZoneInfo) -> bool:
    round_trip = aware.astimezone(UTC).astimezone(tz)
    return round_trip.replace(tzinfo=None) == aware.replace(tzinfo=None)


def _transition(low: datetime, high: datetime, *, tz: ZoneInfo) -> datetime:
    """The instant in (low, high] where the offset changes, to the second (gaps are at most a few hours)."""
    after = high.astimezone(tz).utcoffset()
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)
