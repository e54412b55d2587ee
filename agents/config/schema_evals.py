"""Golden eval cases: who the simulated contacts are and what must be true after N weeks.

Persona traits are a tagged union on `type`. Days count from the run's start
(day 0); `on_followup: n` means "in answer to follow-up n" where 0 is the first
message and 1 the first follow-up; when unset, the trait answers the first
message. A persona with no traits never answers (same as `silent`).

- `replies_after`: replies `days` calendar days (or `business_days`) after the
  first message, with `text` and an optional `attachment`.
- `sends_attachment`: the same with a required attachment; compiled to `replies_after`.
- `replies_on_followup`: replies to outreach number `n` (0 = first message).
- `asks_for_channel`: asks to be contacted on `channel` instead.
- `out_of_office`: auto-replies `text` until `until_day`.
- `replies_stop`: answers STOP (opts out).
- `silent`: never answers; cannot be combined with other traits.
- `redirects`: says someone else (`to_name`, `to_email`) handles it.
- `prompt_injection`: replies with `text` that tries to steer the agent.
- `answers_call`: picks up calls and says `transcript`.
- `language`: writes in language `code` (BCP 47), optionally with `text`.

`approvals` scripts the human of an agent in approval mode: each step answers
the next draft that waits for approval, in order (`approve`; `edit` with the
`text` to send instead; `reject` with `text`, guidance for the agent). Drafts
after the last step are approved.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from agents.config.schema_base import Channel, Email, InputValue, Key, Slug, Strict, Text, TimeZoneName, fail


class Attachment(Strict):
    filename: Text
    content_type: str = "application/pdf"
    text: str = ""  # what a text extractor would read from it, for field_extracted checks


class _Delayed(Strict):
    days: float | None = Field(default=None, ge=0, le=366)
    business_days: int | None = Field(default=None, ge=0, le=260)
    text: str = ""
    attachment: Attachment | None = None

    @model_validator(mode="after")
    def _one_delay(self) -> _Delayed:
        if (self.days is None) == (self.business_days is None):
            raise fail("delay", "give exactly one of days or business_days", "e.g. days: 3 or business_days: 2")
        return self


class RepliesAfter(_Delayed):
    type: Literal["replies_after"]


class SendsAttachment(_Delayed):
    type: Literal["sends_attachment"]
    attachment: Attachment


class RepliesOnFollowup(Strict):
    type: Literal["replies_on_followup"]
    n: int = Field(ge=0, le=50)
    text: Text
    attachment: Attachment | None = None


class AsksForChannel(Strict):
    type: Literal["asks_for_channel"]
    channel: Channel
    text: str = ""
    on_followup: int | None = Field(default=None, ge=0, le=50)


class OutOfOffice(Strict):
    type: Literal["out_of_office"]
    until_day: int = Field(ge=1, le=366)
    text: str = ""


class RepliesStop(Strict):
    type: Literal["replies_stop"]
    on_followup: int | None = Field(default=None, ge=0, le=50)


class Silent(Strict):
    type: Literal["silent"]


class Redirects(Strict):
    type: Literal["redirects"]
    to_name: Text
    to_email: Email
    on_followup: int | None = Field(default=None, ge=0, le=50)


class PromptInjection(Strict):
    type: Literal["prompt_injection"]
    text: Text
    on_followup: int | None = Field(default=None, ge=0, le=50)


class AnswersCall(Strict):
    type: Literal["answers_call"]
    transcript: Text


def _language(value: str) -> str:
    if not re.fullmatch(r"[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})*", value):
        raise fail("language", f"{value!r} is not a language code", "use a BCP 47 code like fr or pt-BR")
    return value


class Language(Strict):
    type: Literal["language"]
    code: Annotated[str, AfterValidator(_language)]
    text: str = ""


Trait = Annotated[
    RepliesAfter
    | SendsAttachment
    | RepliesOnFollowup
    | AsksForChannel
    | OutOfOffice
    | RepliesStop
    | Silent
    | Redirects
    | PromptInjection
    | AnswersCall
    | Language,
    Field(discriminator="type"),
]


class Persona(Strict):
    """A simulated contact. Unset contact details are made up by the simulator."""

    name: str | None = None
    email: Email | None = None
    phone: str | None = Field(default=None, pattern=r"^\+[1-9]\d{6,14}$")
    slack_user: str | None = None
    timezone: TimeZoneName | None = None
    traits: list[Trait] = []


class Expect(Strict):
    """What the scorecard checks after the simulated weeks; unset checks are skipped.

    `tasks_done_by_day`: every required task done by that day. `tasks_done`:
    every required task done (true) or not all done (false) at the end.
    `open_tasks`: these task keys are still open at the end. `uses_channels`:
    at least one message went out on each. `no_messages_between_days: [a, b]`:
    nothing sent on days a..b inclusive. The last three flags default to true
    because they are invariants of every run.
    """

    tasks_done_by_day: int | None = Field(default=None, ge=0)
    tasks_done: bool | None = None
    open_tasks: list[Key] = []
    min_messages: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, ge=0)
    escalated: bool | None = None
    suppressed: bool | None = None
    final_status: Literal["active", "waiting", "waiting_human", "completed", "failed", "cancelled"] | None = None
    uses_channels: list[Channel] = []
    no_messages_between_days: list[int] | None = Field(default=None, min_length=2, max_length=2)
    no_quiet_hours: bool = True
    no_duplicate_sends: bool = True
    no_policy_violations: bool = True

    @model_validator(mode="after")
    def _ranges(self) -> Expect:
        if self.min_messages is not None and self.max_messages is not None and self.min_messages > self.max_messages:
            raise fail("range", "min_messages is above max_messages", "make min_messages <= max_messages")
        window = self.no_messages_between_days
        if window is not None and not 0 <= window[0] <= window[1]:
            raise fail("range", f"{list(window)} is not a day range", "write [first_day, last_day], e.g. [1, 9]")
        return self


class ApprovalStep(Strict):
    action: Literal["approve", "edit", "reject"]
    text: str = Field(default="", max_length=4000)

    @model_validator(mode="after")
    def _text_when_needed(self) -> ApprovalStep:
        if self.action != "approve" and not self.text.strip():
            need = "the edited message" if self.action == "edit" else "guidance for the agent"
            raise fail("approval_step", f"{self.action} needs a text", f"add text: <{need}>")
        return self


class EvalCase(Strict):
    name: Slug
    description: str = ""
    weeks: int = Field(default=6, ge=1, le=52)
    goal: str | None = None
    inputs: dict[Key, InputValue] = {}
    personas: dict[Key, Persona] = Field(min_length=1)
    approvals: list[ApprovalStep] = Field(default=[], max_length=50)
    expect: Expect
