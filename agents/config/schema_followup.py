"""The follow-up policy: when and on which channel the agent reaches out.

The model decides what to say; this policy decides when, deterministically.

Ladder. `steps` is the chase ladder. Step 0 fires `delay` after the run starts
(usually `0m`); each later step fires `delay` after the previous outreach when
no reply came in between. A delay in business days (`2bd`) counts only
`business_days`; a calendar delay (`3d`, `12h`) counts wall time. Any send that
would land outside `business_hours` or inside quiet hours is deferred, never
dropped. After `max_attempts` outreaches without the required tasks done, the
ladder is spent and `on_exhausted` applies:

- `escalate`: one escalation to a human, no further wakes;
- `fail`: the run ends as failed;
- `complete_quietly`: the run ends as completed with its tasks left open.

Replies. A reply always cancels the pending follow-up. When required tasks are
still open after the reply's episode, chasing resumes `reply_grace` after the
reply, unless that episode scheduled its own follow-up (`schedule_followup`),
which wins. `on_reply` says which step fires then:

- `pause`: the step after the last one sent; the attempt count carries on;
- `restart`: step 0 again, with the attempt count reset to zero;
- `stop`: none; the run waits for another reply or a human.

Holidays. `holidays` names public-holiday calendars (the `holidays` package):
an ISO country code (`GB`), a list of them, or `contact`: the country of the
timezone the hours are read in (the contact's, else the organization's). A
public holiday is not a business day: nothing is sent and no business-day
delay counts it.

Promises. A contact's promise with a date ("we will pay on the 15th", recorded
with the `record_promise` tool) pauses chasing until the date plus
`promise_grace` (default `2bd`: two business days for a payment to land);
then the next outreach checks whether it went through and the ladder resumes.
A broken promise never completes a task: only the task's `done_when` does.

Timezone. Business days, business hours and quiet hours are read in the
contact's timezone (`contact`), the organization's (`organization`), or the
fixed `timezone` (`fixed`, which then requires `timezone`).
"""

from __future__ import annotations

from difflib import get_close_matches
from functools import cache
from typing import Annotated, Literal

import holidays as holiday_calendars
from pydantic import BeforeValidator, Field, field_validator, model_validator

from agents.config import durations
from agents.config.schema_base import Channel, ClockTime, DurationValue, Seconds, Strict, TimeZoneName, Weekday, fail


class BusinessHours(Strict):
    """Sends happen between `start` and `end` (same day, start before end)."""

    start: ClockTime = "09:00"
    end: ClockTime = "17:00"

    @model_validator(mode="after")
    def _ordered(self) -> BusinessHours:
        if self.start >= self.end:
            raise fail(
                "hours", f"start {self.start} is not before end {self.end}", 'e.g. {start: "09:00", end: "17:00"}'
            )
        return self


# The country of the contact's timezone (runs.policy.public_holidays.CONTACT).
CONTACT_COUNTRY = "contact"
# Common names people write for a code the package spells otherwise.
COUNTRY_ALIASES = {"UK": "GB", "EN": "GB", "USA": "US"}


@cache
def _countries() -> frozenset[str]:
    return frozenset(holiday_calendars.list_supported_countries())


def _calendars(value: object) -> object:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise fail("holidays", f"expected a country code or a list of them, got {type(value).__name__}",
                   "write e.g. holidays: GB, holidays: [GB, IE] or holidays: contact")
    for item in value:
        if item == CONTACT_COUNTRY:
            continue
        if not isinstance(item, str) or item not in _countries():
            known = COUNTRY_ALIASES.get(str(item).upper()) or next(iter(get_close_matches(
                str(item).upper(), sorted(_countries()), n=1)), None)
            hint = f"did you mean {known}?" if known else "use an ISO 3166 country code like GB, US or DE"
            raise fail("holidays", f"{item!r} is not a country with a public-holiday calendar",
                       f"{hint} (or `contact` for the contact's country)")
    return list(dict.fromkeys(value))


Calendars = Annotated[list[str], BeforeValidator(_calendars)]


class Step(Strict):
    delay: DurationValue
    channel: Channel


# A grace longer than this is a typo or a promise the agent should not wait on without a human.
MAX_PROMISE_GRACE_S = 30 * 86400
MAX_PROMISE_GRACE_BD = 20


class FollowupSpec(Strict):
    timezone_source: Literal["contact", "organization", "fixed"] = "contact"
    timezone: TimeZoneName | None = None
    business_days: list[Weekday] = Field(default=["mon", "tue", "wed", "thu", "fri"], min_length=1)
    business_hours: BusinessHours = BusinessHours()
    steps: list[Step] = Field(min_length=1)
    max_attempts: int | None = Field(default=None, ge=1)
    on_exhausted: Literal["escalate", "fail", "complete_quietly"] = "escalate"
    on_reply: Literal["pause", "restart", "stop"] = "pause"
    reply_grace: Seconds = durations.parse_seconds("2d")
    holidays: Calendars = []
    promise_grace: DurationValue = durations.Duration(business_days=2)
    # An escalation of this agent's runs still unanswered this long after it opened is announced again (once).
    escalation_sla: Seconds = durations.parse_seconds("4h")

    @field_validator("promise_grace")
    @classmethod
    def _promise_grace_bounded(cls, grace: durations.Duration) -> durations.Duration:
        if grace.seconds > MAX_PROMISE_GRACE_S or grace.business_days > MAX_PROMISE_GRACE_BD:
            raise fail("promise_grace", "promise_grace is longer than 30 days (20 business days)",
                       "a few days is usual, e.g. promise_grace: 2bd")
        return grace
