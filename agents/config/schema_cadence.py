"""Cadence: recurring check-ins ("every Monday at 10:00"), apart from the ladder that chases one of them.

`every` is the period (whole days: 1w, 2w, 1d); `on` pins weekly periods to a
weekday and `at` is the local time of the check-in (default: the start of
business hours). One check-in per period: a check-in due on a day that is not
a business day (a weekend, a public holiday of `followup.holidays`) moves to
the next business day, and an update from the contact during a period counts
as that period's check-in. The follow-up ladder still chases each check-in
(its first step is the check-in itself); a chase never runs into the next
period. `escalate_after` check-ins in a row without a word from the contact
spend the cadence: `followup.on_exhausted` applies then. `until` (a date, or a
duration counted from the run's start) ends the check-ins; the last period's
chase still runs, then `on_exhausted` applies.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import Field, PlainValidator, model_validator

from agents.config import durations
from agents.config.schema_base import ClockTime, Strict, Weekday, fail

DAY_S = 86400
WEEK_S = 7 * DAY_S


def _every(value: object) -> int:
    try:
        seconds = durations.parse_seconds(value)
    except durations.DurationError as error:
        raise fail("duration", str(error), "write whole days or weeks, e.g. 1w, 2w or 1d") from None
    if seconds < DAY_S or seconds % DAY_S:
        raise fail("cadence", f"{value!r} is not a whole number of days",
                   "a check-in happens at most once a day: write 1d, 1w, 2w")
    return seconds


def _until(value: object) -> dict:
    """{"date": "YYYY-MM-DD"} or {"after_s": seconds from the run's start}."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):  # YAML reads 2030-03-01 as a date
        return {"date": value.isoformat()}
    if isinstance(value, str):
        try:
            return {"date": dt.date.fromisoformat(value.strip()).isoformat()}
        except ValueError:
            pass
    try:
        return {"after_s": durations.parse_seconds(value)}
    except durations.DurationError:
        raise fail("cadence", f"{value!r} is neither a date nor a duration",
                   "write a date like 2030-06-30 or a duration from the run's start like 8w") from None


Every = Annotated[int, PlainValidator(_every, json_schema_input_type=str)]
Until = Annotated[dict, PlainValidator(_until, json_schema_input_type=str)]


class CadenceSpec(Strict):
    every: Every
    on: Weekday | None = None
    at: ClockTime | None = None
    until: Until | None = None
    escalate_after: int = Field(default=3, ge=1, le=52)

    @model_validator(mode="after")
    def _weekday_needs_weeks(self) -> CadenceSpec:
        if self.on is not None and self.every % WEEK_S:
            raise fail("cadence", f"`on: {self.on}` needs a period of whole weeks, not {self.every // DAY_S} days",
                       "use every: 1w (or 2w), or remove `on`")
        return self
