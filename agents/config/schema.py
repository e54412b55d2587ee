"""The agent config: what a builder writes in YAML, as pydantic models.

Only the shape and per-field rules live here; rules that relate fields to each
other (a step's channel must be a capability, a task's contact role must be
declared...) live in `semantics.py`, so they are reported even when another
part of the config is malformed.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from agents.config.schema_base import CHANNELS, Channel, ClockTime, Domain, Key, Slug, Strict, Text, fail
from agents.config.schema_cadence import CadenceSpec
from agents.config.schema_evals import EvalCase
from agents.config.schema_followup import FollowupSpec
from agents.config.schema_model import ModelSpec
from agents.config.schema_tasks import InputSpec, TaskSpec

ToolName = Literal[
    "send_email",
    "send_sms",
    "send_slack",
    "place_call",
    "ask_human",
    "mark_task_done",
    "schedule_followup",
    "record_promise",
    "record_absence",
    "note",
    "finish",
]
TOOL_NAMES: tuple[str, ...] = get_args(ToolName)

# The channel an outbound tool uses; the agent needs that capability to list the tool.
TOOL_CHANNEL = {"send_email": "email", "send_sms": "sms", "send_slack": "slack", "place_call": "voice"}
CHANNEL_TOOL = {channel: tool for tool, channel in TOOL_CHANNEL.items()}
INTERNAL_TOOLS = ("ask_human", "mark_task_done", "schedule_followup", "record_promise", "record_absence", "note",
                  "finish")


class ContactSpec(Strict):
    """A role a run fills with a person. `channels` defaults to all capabilities."""

    role: Key
    required: bool = True
    channels: list[Channel] | None = Field(default=None, min_length=1)


class QuietHours(Strict):
    """No sends from `start` to `end` in the contact's timezone; may wrap midnight (20:00 → 08:00)."""

    start: ClockTime
    end: ClockTime

    @model_validator(mode="after")
    def _not_empty(self) -> QuietHours:
        if self.start == self.end:
            raise fail(
                "quiet_hours", "start and end are equal", 'e.g. {start: "20:00", end: "08:00"}, or null for none'
            )
        return self


class Caps(Strict):
    """Outbound messages per contact across the whole organization, all agents together."""

    per_day: int | None = Field(default=2, ge=1)
    per_week: int | None = Field(default=6, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> Caps:
        if self.per_day is not None and self.per_week is not None and self.per_day > self.per_week:
            raise fail("caps", "per_day is above per_week", "make per_day <= per_week")
        return self


class Recipients(Strict):
    """Run contacts are always allowed; `email_domains` adds addresses at those domains."""

    run_contacts: Literal[True] = True
    email_domains: list[Domain] = []


class ComplianceSpec(Strict):
    quiet_hours: QuietHours | None = QuietHours(start="20:00", end="08:00")
    per_contact_caps: Caps = Caps()
    opt_out_text: dict[Channel, Text] = {}
    forbidden_phrases: list[Text] = []
    allowed_recipients: Recipients = Recipients()

    @field_validator("allowed_recipients", mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        # `run_contacts` and a bare list of domains are shorthands for the mapping form.
        if value == "run_contacts":
            return {}
        if isinstance(value, list):
            return {"email_domains": value}
        if isinstance(value, str):
            raise fail("recipients", f"{value!r} is not a recipient policy", "use run_contacts or a list of domains")
        return value


# When the agent answers a contact's reply with a message of its own that asks nothing (runs.acknowledgements):
# after every reply, only the thank-you that completes the run, or never.
Acknowledge = Literal["every_reply", "on_completion", "never"]
ACKNOWLEDGE_MODES: tuple[str, ...] = get_args(Acknowledge)

ApprovalMode = Literal["none", "first_message", "all"]
APPROVAL_MODES: tuple[str, ...] = get_args(ApprovalMode)


class ApprovalsSpec(Strict):
    """Which outbound messages wait as drafts for a human (runs.approvals): `outbound` for every channel,
    `channels` overriding it per channel. first_message: only the run's first message to each contact."""

    outbound: ApprovalMode = "none"
    channels: dict[Channel, ApprovalMode] = {}

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        # `approvals: all` is a shorthand for `approvals: {outbound: all}`.
        if isinstance(value, str):
            if value not in APPROVAL_MODES:
                raise fail("approvals", f"{value!r} is not an approval mode",
                           f"use one of {', '.join(APPROVAL_MODES)}, e.g. {{outbound: first_message}}")
            return {"outbound": value}
        return value


class AgentConfig(Strict):
    slug: Slug = Field(max_length=64)
    name: Text = Field(max_length=120)
    description: str = ""
    capabilities: list[Channel] = Field(min_length=1)
    instructions: Text
    inputs: list[InputSpec] = []
    contacts: list[ContactSpec] = Field(min_length=1)
    tasks: list[TaskSpec] = Field(min_length=1)
    followup: FollowupSpec
    cadence: CadenceSpec | None = None
    tools: list[ToolName] | None = None
    compliance: ComplianceSpec = ComplianceSpec()
    approvals: ApprovalsSpec = ApprovalsSpec()
    # on_completion: a thank-you after every update was the complaint; a reply that asks something still goes.
    acknowledge: Acknowledge = "on_completion"
    model: ModelSpec = ModelSpec()
    evals: list[EvalCase] = []

    def tool_names(self) -> tuple[str, ...]:
        """The listed tools in canonical order; unset means the outbound tools of the capabilities plus all others."""
        if self.tools is not None:
            listed = set(self.tools)
        else:
            listed = {CHANNEL_TOOL[channel] for channel in self.capabilities} | set(INTERNAL_TOOLS)
        return tuple(name for name in TOOL_NAMES if name in listed)

    def contact_channels(self, contact: ContactSpec) -> tuple[str, ...]:
        channels = set(contact.channels if contact.channels is not None else self.capabilities)
        return tuple(channel for channel in CHANNELS if channel in channels)
