"""Durations as builders write them: "90s", "30m", "12h", "3d", "1w", "1d12h", "2bd".

A business-day count ("2bd") cannot be turned into seconds without a calendar
and a timezone, so it stays a separate count; the follow-up policy resolves it
against the contact's business days at run time.
"""

from __future__ import annotations

import re
from typing import NamedTuple

HINT = "durations look like 3d, 2bd (business days), 12h, 30m, 90s, 1w or 1d12h"

UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}

# Upper bounds catch typos ("300d" for "30d"); nothing in a follow-up ladder waits a year.
MAX_SECONDS = 366 * 86400
MAX_BUSINESS_DAYS = 260

_CALENDAR = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_BUSINESS = re.compile(r"(\d+)bd")


class DurationError(ValueError):
    """The text is not a duration; str(error) says why, `hint` says how to write one."""

    def __init__(self, message: str, *, hint: str = HINT) -> None:
        super().__init__(message)
        self.hint = hint


class Duration(NamedTuple):
    """Exactly one of the two is non-zero, except for the zero duration."""

    seconds: int = 0
    business_days: int = 0

    @property
    def is_business(self) -> bool:
        return self.business_days > 0


def parse(value: object) -> Duration:
    """Parse "3d", "2bd", "1d12h"...; the integer 0 is accepted (YAML `delay: 0`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DurationError(f"expected a duration like 3d, got {type(value).__name__}")
    if isinstance(value, int):
        # A bare number is ambiguous (days? seconds?); only zero means the same in every unit.
        if value == 0:
            return Duration()
        raise DurationError(f"{value} has no unit")
    text = value.strip().lower()
    if not text:
        raise DurationError("empty duration")
    if business := _BUSINESS.fullmatch(text):
        return _business(int(business.group(1)), text=text)
    calendar = _CALENDAR.fullmatch(text)
    if calendar is None or not any(calendar.groups()):
        raise DurationError(f"{value!r} is not a duration")
    seconds = sum(int(n) * UNIT_SECONDS[unit] for n, unit in zip(calendar.groups(), "wdhms", strict=True) if n)
    if seconds > MAX_SECONDS:
        raise DurationError(f"{value!r} is longer than 366 days", hint="use a shorter duration, e.g. 30d")
    return Duration(seconds=seconds)


def parse_seconds(value: object) -> int:
    """Parse a calendar duration to seconds; business days are refused (they need a calendar)."""
    duration = parse(value)
    if duration.is_business:
        raise DurationError(
            f"{value!r} counts business days, which is not allowed here",
            hint="use calendar units here: 2d, 12h, 30m",
        )
    return duration.seconds


def _business(days: int, *, text: str) -> Duration:
    if days > MAX_BUSINESS_DAYS:
        raise DurationError(f"{text!r} is more than {MAX_BUSINESS_DAYS} business days", hint="use a shorter duration")
    return Duration(business_days=days)
