"""Shared building blocks of the config schema: the strict base model and field types.

Field validators raise `PydanticCustomError` with a `hint` in their context so
the validation layer can show how to fix each error, not only what is wrong.
"""

from __future__ import annotations

import re
import zoneinfo
from difflib import get_close_matches
from functools import cache
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainValidator
from pydantic_core import PydanticCustomError

from agents.config import durations, patterns

Channel = Literal["email", "sms", "slack", "voice"]
CHANNELS: tuple[str, ...] = get_args(Channel)

# The contact field each channel needs: a run must provide it for that channel.
CHANNEL_CONTACT_FIELD = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[str, ...] = get_args(Weekday)


class Strict(BaseModel):
    """Unknown keys are errors (typos must not pass silently) and values are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False, allow_inf_nan=False)


def fail(kind: str, message: str, hint: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message, {"hint": hint})


def _name_check(kind: str, pattern: str, example: str):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise fail(kind, f"{value!r} is not a valid {kind}", f"use lowercase letters, digits and {example}")
        return value

    return check


Slug = Annotated[str, AfterValidator(_name_check("slug", r"[a-z0-9]+(?:-[a-z0-9]+)*", "dashes, e.g. w9-collector"))]
Key = Annotated[
    str, AfterValidator(_name_check("key", r"[a-z][a-z0-9_]{0,62}", "underscores, starting with a letter, e.g. vendor"))
]


def _text(value: str) -> str:
    if not value.strip():
        raise fail("empty", "must not be empty", "write some text")
    return value


Text = Annotated[str, AfterValidator(_text)]


def _regex(value: str) -> str:
    if not value:
        raise fail("regex", "empty pattern matches everything", "write a pattern, e.g. (?i)w-?9")
    try:
        patterns.compiled(value)
    except patterns.PatternError as error:
        raise fail("regex", f"invalid regular expression: {error}", patterns.SYNTAX_HINT) from None
    return value


Regex = Annotated[str, AfterValidator(_regex)]


# A 24-hour time of day, "HH:MM": such texts order as the times do.
CLOCK_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d")


def _clock(value: object) -> str:
    # Integers arrive when a YAML parser reads 17:00 as sexagesimal (YAML 1.1) or JSON sends minutes.
    if not isinstance(value, str) or not CLOCK_TIME.fullmatch(value):
        raise fail("clock", f"{value!r} is not a time of day", 'write 24-hour "HH:MM" in quotes, e.g. "09:00"')
    return value


ClockTime = Annotated[str, PlainValidator(_clock, json_schema_input_type=str)]


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _timezone(value: str) -> str:
    if value not in _zones():
        close = get_close_matches(value, sorted(_zones()), n=1)
        hint = f"did you mean {close[0]}?" if close else "use an IANA name like Europe/Paris or America/New_York"
        raise fail("timezone", f"unknown timezone {value!r}", hint)
    return value


TimeZoneName = Annotated[str, AfterValidator(_timezone)]


def _duration(value: object) -> durations.Duration:
    try:
        return durations.parse(value)
    except durations.DurationError as error:
        raise fail("duration", str(error), error.hint) from None


def _seconds(value: object) -> int:
    try:
        return durations.parse_seconds(value)
    except durations.DurationError as error:
        raise fail("duration", str(error), error.hint) from None


DurationValue = Annotated[durations.Duration, PlainValidator(_duration, json_schema_input_type=str)]
Seconds = Annotated[int, PlainValidator(_seconds, json_schema_input_type=str)]


def _domain(value: str) -> str:
    if not re.fullmatch(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,}", value):
        raise fail("domain", f"{value!r} is not an email domain", "write a lowercase domain like example.com")
    return value


Domain = Annotated[str, AfterValidator(_domain)]


def _email(value: str) -> str:
    if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}", value):
        raise fail("email", f"{value!r} is not an email address", "write an address like ada@example.com")
    return value


Email = Annotated[str, AfterValidator(_email)]


def _scalar(value: object) -> str | int | float | bool:
    if not isinstance(value, (str, int, float, bool)):
        raise fail(
            "scalar", f"expected text or a number, got {type(value).__name__}", 'write a plain value, e.g. "INV-1042"'
        )
    return value


InputValue = Annotated[str | int | float | bool, PlainValidator(_scalar)]
