"""Dates as people write them in replies: "the 15th", "next Friday", "in 2 weeks", "until the 10th", "Jan 10".

Pure functions over a text and "today" in the writer's zone (the caller turns
the run's clock into the contact's local date: "the 15th" means the 15th
where the contact lives). `find` returns the first date the text names, with
the rule that read it, so a classification can be journaled with its reason.

Resolution:
- an explicit date (2030-03-15, "March 15", "15 March 2030", "Jan 10") without
  a year is the next such date from today (today included);
- "the 15th" is the next 15th from today (today included), skipping months
  too short for it;
- a weekday ("Friday", "next Friday", "on Fri") is the next one after today;
- "today", "tomorrow", "next week" (Monday after this week), "end of the week"
  (Friday), "end of the month";
- "in 3 days", "in 2 weeks", "in a month", "in 5 business days", and the
  length of an absence ("for 2 weeks", "2 weeks off") count from today;
  business days skip Saturdays and Sundays.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

# Full names only: "sat" or "sun" alone are ordinary words more often than days.
WEEKDAYS = {name.lower(): index for index, name in enumerate(calendar.day_name)}
MONTHS = {name.lower(): index for index, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): index for index, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12, "a": 1, "an": 1, "a couple of": 2, "a couple": 2, "couple of": 2,
           "a few": 3, "few": 3}
# An absence or a delay longer than this is a misreading ("in 300 days" is not a follow-up date).
MAX_DAYS = 366

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY = "|".join(sorted(WEEKDAYS, key=len, reverse=True))
_COUNT = r"\d{1,3}|" + "|".join(sorted((re.escape(n) for n in NUMBERS), key=len, reverse=True))
_UNIT = r"business days?|working days?|days?|weeks?|months?"

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso_date", re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")),
    ("month_day", re.compile(rf"\b({_MONTH})\.? (\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? (\d{{4}}))?")),
    ("day_month", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH})\b\.?(?:,? (\d{{4}}))?")),
    ("numeric_date", re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b")),
    ("relative", re.compile(rf"\b(?:in|within|after) (?:the next )?({_COUNT}) ({_UNIT})\b")),
    ("absence_length", re.compile(
        rf"\b(?:for|next|another|off for|away for|out for) (?:the next )?({_COUNT}) ({_UNIT})\b"
        rf"|\b({_COUNT}) ({_UNIT}) (?:off|away|of (?:leave|vacation|holiday))\b")),
    ("ordinal_day", re.compile(r"\bthe (\d{1,2})(?:st|nd|rd|th)\b")),
    ("weekday", re.compile(rf"\b(?:(next|this|coming|on|by|until|till|before|after) )?({_WEEKDAY})\b")),
    ("today", re.compile(r"\b(today|tonight|end of (?:the )?day|eod)\b")),
    ("tomorrow", re.compile(r"\btomorrow\b")),
    ("end_of_week", re.compile(r"\b(?:end of (?:the |this )?week|eow)\b")),
    ("end_of_month", re.compile(r"\b(?:end of (?:the |this )?month|eom|month[- ]end)\b")),
    ("next_week", re.compile(r"\bnext week\b")),
)


@dataclass(frozen=True)
class Found:
    """A date read from a text. `days_ahead` is set for relative phrasings ("in 3 days": 3) so a caller can keep
    the time of day; `rule` names the pattern that read it; `phrase` is the words it read."""

    day: date
    rule: str
    phrase: str
    days_ahead: int | None = None


def find(text: str, *, today: date) -> Found | None:
    """The first date `text` names, resolved from `today` (the writer's local date); None when it names none.

    When several phrasings match, the one that starts earliest in the text wins ("until the 10th, back in
    2 weeks" → the 10th); at one position the order of _PATTERNS decides.
    """
    normal = normalize(text)
    best: tuple[int, int, Found] | None = None
    for order, (rule, pattern) in enumerate(_PATTERNS):
        for match in pattern.finditer(normal):
            found = _READERS[rule](match, today)
            if found is None:
                continue
            key = (match.start(), order)
            if best is None or key < best[:2]:
                best = (*key, Found(found[0], rule, match.group(0), found[1]))
            break
    return best[2] if best else None


def normalize(text: str) -> str:
    return " ".join((text or "").lower().replace("\u2019", "'").replace("\u2018", "'").split())


def add_business_days(start: date, count: int) -> date:
    """`count` Monday-to-Friday days after `start` (0: start itself)."""
    current = start
    while count > 0:
        current += timedelta(days=1)
        if current.weekday() < 5:
            count -= 1
    return current


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS[word]


def _iso(match: re.Match, today: date):
    return _dated(_safe(int(match.group(1)), int(match.group(2)), int(match.group(3))))


def _month_day(match: re.Match, today: date):
    return _with_year(today, MONTHS[match.group(1)], int(match.group(2)), match.group(3))


def _day_month(match: re.Match, today: date):
    return _with_year(today, MONTHS[match.group(2)], int(match.group(1)), match.group(3))


def _numeric(match: re.Match, today: date):
    # US order (month/day/year), as the invoice templates print dates; a first number above 12 is a day.
    first, second, year = int(match.group(1)), int(match.group(2)), int(match.group(3))
    year += 2000 if year < 100 else 0
    month, day = (second, first) if first > 12 else (first, second)
    return _dated(_safe(year, month, day))


def _relative(match: re.Match, today: date):
    groups = [g for g in match.groups() if g is not None]
    count, unit = _count(groups[0]), groups[1]
    if unit.startswith(("business", "working")):
        return _dated(add_business_days(today, count) if count <= MAX_DAYS else None)
    days = count * {"d": 1, "w": 7, "m": 30}[unit[0]]
    if unit.startswith("month"):
        target = _add_months(today, count)
        days = (target - today).days
    if days > MAX_DAYS or days <= 0:
        return None
    return today + timedelta(days=days), days


def _ordinal_day(match: re.Match, today: date):
    day = int(match.group(1))
    if not 1 <= day <= 31:
        return None
    year, month = today.year, today.month
    for _ in range(13):
        found = _safe(year, month, day)
        if found is not None and found >= today:
            return found, None
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


def _weekday(match: re.Match, today: date):
    ahead = (WEEKDAYS[match.group(2)] - today.weekday()) % 7 or 7
    return today + timedelta(days=ahead), ahead


def _today(match: re.Match, today: date):
    return today, 0


def _tomorrow(match: re.Match, today: date):
    return today + timedelta(days=1), 1


def _end_of_week(match: re.Match, today: date):
    ahead = (4 - today.weekday()) % 7
    return today + timedelta(days=ahead), ahead


def _end_of_month(match: re.Match, today: date):
    last = calendar.monthrange(today.year, today.month)[1]
    return today.replace(day=last), last - today.day


def _next_week(match: re.Match, today: date):
    ahead = 7 - today.weekday()
    return today + timedelta(days=ahead), ahead


_READERS = {
    "iso_date": _iso, "month_day": _month_day, "day_month": _day_month, "numeric_date": _numeric,
    "relative": _relative, "absence_length": _relative, "ordinal_day": _ordinal_day, "weekday": _weekday,
    "today": _today, "tomorrow": _tomorrow, "end_of_week": _end_of_week, "end_of_month": _end_of_month,
    "next_week": _next_week,
}


def _with_year(today: date, month: int, day: int, year: str | None):
    if year:
        return _dated(_safe(int(year), month, day))
    found = _safe(today.year, month, day)
    if found is not None and found < today:
        found = _safe(today.year + 1, month, day)
    return _dated(found)


def _dated(found: date | None):
    return (found, None) if found is not None else None


def _add_months(start: date, count: int) -> date:
    month = start.month - 1 + count
    year, month = start.year + month // 12, month % 12 + 1
    return date(year, month, min(start.day, calendar.monthrange(year, month)[1]))


def _safe(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None
