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
- `answers_call`: picks up calls and says `transcript`, or the nth entry of
  `transcripts` on the nth call (the last one again after that).
- `language`: writes in language `code` (BCP 47), optionally with `text`.
- `redelivers`: the provider delivers the persona's message number `message`
  (0 = its first) a second time, `after` later, with the same provider id:
  the intake must dedupe it.

Replies (`replies_after`, `sends_attachment`, `replies_on_followup`) take
`via: direct` (default: an email to the run's reply-to address answering the
message's Message-ID, a Slack DM, an SMS from the contact's number) or
`via: thread` (an email to the organization's mailbox found only by
In-Reply-To/References; a reply in the Slack thread of the message).
`replies_after` with `relative_to: latest` times its reply from the latest
chasing message instead of the first: each new one before the reply is due
moves it, and it answers once.

`start` (a date) starts the run at 09:00 that day in the organization's zone.
`human` scripts answers to the run's escalations (approvals aside): each step
answers the next escalation still open (of `kind`, when given) `after` it was
raised, with an option of runs.answers (`option`, `text`, `data`). `faults`
are windows in which the model (`model_429`, `model_timeout`, `model_5xx`) or
the sending provider (`provider_unreachable`, `provider_429`,
`provider_timeout`; of one `channel` when given) fails the way a real one
does; a window runs from `from_day` (at `at`, default midnight, in the
organization's zone) to the end of `to_day`, or for `lasts`.

`approvals` scripts the human of an agent in approval mode: each step answers
the next draft that waits for approval, in order (`approve`; `edit` with the
`text` to send instead; `reject` with `text`, guidance for the agent). Drafts
after the last step are approved.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, model_validator

from agents.config.schema_base import (
    Channel,
    ClockTime,
    Email,
    InputValue,
    Key,
    Seconds,
    Slug,
    Strict,
    Text,
    TimeZoneName,
    fail,
)

# Escalation kinds (runs.models.EscalationKind) a case can expect or script a human for.
EscalationKindName = Literal["question", "uncertain_send", "stuck", "guardrail_block", "unmatched_inbound",
                             "provider_outage", "handoff"]
# Options of runs.answers a scripted human can choose (approvals have their own `approvals` script).
HumanOption = Literal["resume", "guide_agent", "reply_to_contact", "send_anyway", "stop_contacting", "handle_myself",
                      "stop_run", "mark_done", "retry", "use_contact", "switch_channel", "sent", "not_sent", "dismiss",
                      "attach_to_run"]
FaultKind = Literal["model_429", "model_timeout", "model_5xx", "provider_unreachable", "provider_429",
                    "provider_timeout"]
# A message counts as `acknowledgement` when sent in answer to the contact's own message, else `chasing`.
MessageKind = Literal["any", "chasing", "acknowledgement"]
Via = Literal["direct", "thread"]


class Attachment(Strict):
    filename: Text
    content_type: str = "application/pdf"
    text: str = ""  # what a text extractor would read from it, for field_extracted checks


class _Delayed(Strict):
    days: float | None = Field(default=None, ge=0, le=366)
    business_days: int | None = Field(default=None, ge=0, le=260)
    text: str = ""
    attachment: Attachment | None = None
    via: Via = "direct"
    relative_to: Literal["first", "latest"] = "first"

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
    via: Via = "direct"


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
    transcript: Text | None = None
    transcripts: list[Text] = Field(default=[], max_length=50)

    @model_validator(mode="after")
    def _one_script(self) -> AnswersCall:
        if (self.transcript is None) == (not self.transcripts):
            raise fail("transcript", "give exactly one of transcript or transcripts",
                       "e.g. transcript: Paying Friday, or transcripts: [first call, second call]")
        return self


class Redelivers(Strict):
    type: Literal["redelivers"]
    message: int = Field(default=0, ge=0, le=50)
    after: Seconds = 300


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
    | Redelivers
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


def _day_range(value: list[int]) -> list[int]:
    if not 0 <= value[0] <= value[1]:
        raise fail("range", f"{list(value)} is not a day range", "write [first_day, last_day], e.g. [1, 9]")
    return value


Days = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2), AfterValidator(_day_range)]


class _Bounds(Strict):
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> _Bounds:
        if self.min is None and self.max is None:
            raise fail("bounds", "give min, max or both", "e.g. max: 2")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise fail("range", "min is above max", "make min <= max")
        return self


class MessageCount(_Bounds):
    """Messages of `kind` sent on `days` (the whole run when unset)."""

    days: Days | None = None
    kind: MessageKind = "any"


class PeriodCount(_Bounds):
    """Messages of `kind` in each whole period of `days` days counted from day `from_day`."""

    days: int = Field(ge=1, le=366)
    kind: MessageKind = "chasing"
    from_day: int = Field(default=0, ge=0)


class QuietAfter(Strict):
    """No message of `kind` within `days` after the first `event` (nothing is checked if it never happened)."""

    event: Literal["first_reply", "last_reply", "escalation", "task_done", "opt_out", "human_answer"]
    days: float = Field(gt=0, le=366)
    kind: MessageKind = "any"


class ContentRule(Strict):
    """`contains`: some message of `kind` on `days` contains the text; `not_contains`: none does (case-insensitive)."""

    contains: str | None = None
    not_contains: str | None = None
    kind: MessageKind = "any"
    days: Days | None = None

    @model_validator(mode="after")
    def _one_text(self) -> ContentRule:
        texts = [t for t in (self.contains, self.not_contains) if t is not None]
        if len(texts) != 1 or not texts[0].strip():
            raise fail("content", "give exactly one non-empty contains or not_contains",
                       "e.g. contains: attach it again, or not_contains: lawsuit")
        return self


class Expect(Strict):
    """What the scorecard checks after the simulated weeks; unset checks are skipped.

    Days are calendar days in the organization's zone (day 0: the start date).
    `tasks_done_by_day`: every required task done by that day. `tasks_done`:
    every required task done (true) or not all done (false) at the end.
    `open_tasks`: these task keys are still open at the end. `uses_channels`:
    at least one message went out on each. `no_messages_between_days: [a, b]`:
    nothing sent on days a..b inclusive. `escalations` / `escalation_kinds`:
    the exact number and kinds (in the order raised) of escalations, approvals
    aside. `escalated_by_day`: one was raised by then. `not_done_before_day`: no
    required task was done earlier. `messages`: counts in day ranges;
    `per_period`: counts in every period (one check-in a week: {days: 7, max: 1});
    `quiet_after`: silence after an event; `content`: text that must (not)
    appear. A message is `chasing` unless it answered the contact's own message
    (`acknowledgement`). `no_episodes_after_escalation`: no timer woke the run
    while an escalation was open. `no_open_escalation_at_completion`: a
    completed run leaves none open. The last three flags default to true
    because they are invariants of every run.
    """

    tasks_done_by_day: int | None = Field(default=None, ge=0)
    tasks_done: bool | None = None
    open_tasks: list[Key] = []
    min_messages: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, ge=0)
    escalated: bool | None = None
    escalations: int | None = Field(default=None, ge=0)
    escalation_kinds: list[EscalationKindName] | None = None
    escalated_by_day: int | None = Field(default=None, ge=0)
    not_done_before_day: int | None = Field(default=None, ge=1)
    messages: list[MessageCount] = []
    per_period: list[PeriodCount] = []
    quiet_after: list[QuietAfter] = []
    content: list[ContentRule] = []
    suppressed: bool | None = None
    final_status: Literal["active", "waiting", "waiting_human", "completed", "failed", "cancelled"] | None = None
    uses_channels: list[Channel] = []
    no_messages_between_days: list[int] | None = Field(default=None, min_length=2, max_length=2)
    no_episodes_after_escalation: bool | None = None
    no_open_escalation_at_completion: bool | None = None
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
        if (self.escalations is not None and self.escalation_kinds is not None
                and self.escalations != len(self.escalation_kinds)):
            raise fail("escalations", f"escalations is {self.escalations} but escalation_kinds names "
                       f"{len(self.escalation_kinds)}", "make them agree, or keep only escalation_kinds")
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


class HumanStep(Strict):
    """One scripted answer: `option` of runs.answers, `after` the escalation it answers was raised."""

    option: HumanOption
    after: Seconds = 3600
    text: str = Field(default="", max_length=4000)
    # The option's data (runs.answers), e.g. {task_key: collect_w9}, {address: ..., channel: email}, {channels: [sms]}.
    data: dict[Key, InputValue | list[str]] = {}
    kind: EscalationKindName | None = None


def _one_or_many(value: object) -> object:
    return [value] if isinstance(value, dict) else value


class FaultWindow(Strict):
    kind: FaultKind
    from_day: int = Field(ge=0, le=366)
    at: ClockTime | None = None
    to_day: int | None = Field(default=None, ge=0, le=366)
    lasts: Seconds | None = None
    channel: Channel | None = None

    @model_validator(mode="after")
    def _one_end(self) -> FaultWindow:
        if (self.to_day is None) == (self.lasts is None):
            raise fail("fault", "give exactly one of to_day or lasts", "e.g. to_day: 4, or lasts: 6h")
        if self.to_day is not None and self.to_day < self.from_day:
            raise fail("range", f"to_day {self.to_day} is before from_day {self.from_day}", "make to_day >= from_day")
        if self.lasts is not None and self.lasts <= 0:
            raise fail("fault", "lasts must be longer than zero", "e.g. lasts: 3h")
        if self.channel is not None and self.kind.startswith("model_"):
            raise fail("fault", "a model fault has no channel", "drop channel, or use a provider_ fault")
        return self


def _date(value: object) -> str:
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise fail("date", f"{value!r} is not a date", "write YYYY-MM-DD, e.g. 2026-12-28")


class EvalCase(Strict):
    name: Slug
    description: str = ""
    weeks: int = Field(default=6, ge=1, le=52)
    start: Annotated[str, PlainValidator(_date, json_schema_input_type=str)] | None = None
    goal: str | None = None
    inputs: dict[Key, InputValue] = {}
    personas: dict[Key, Persona] = Field(min_length=1)
    approvals: list[ApprovalStep] = Field(default=[], max_length=50)
    human: Annotated[list[HumanStep], BeforeValidator(_one_or_many), Field(max_length=50)] = []
    faults: list[FaultWindow] = Field(default=[], max_length=20)
    expect: Expect
