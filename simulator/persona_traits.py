"""What each persona trait does when the persona receives a message (agents/config/schema_evals.py names them).

A trait reacts to one Outbound at a time and returns the Actions it causes.
"Outreach n" counts the run's chasing messages to this persona (start,
follow-up and human-answer episodes; 0 is the first), not its answers to the
persona's own replies, so "replies on follow-up 2" means the second reminder.
Delays are virtual time; the few random ones come from the persona's seeded rng.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from simulator import documents

ASK_FOR_CHANNEL = {"email": "Please email me instead", "sms": "Please text me instead",
                   "slack": "Please slack me instead", "voice": "Please call me instead"}


@dataclass(frozen=True)
class Outbound:
    """A message the run sent to a persona, as the persona receives it."""

    id: int
    channel: str
    tool: str
    at: datetime
    subject: str
    text: str
    # Index among the run's chasing messages to this persona; None for an answer to the persona's own reply.
    outreach: int | None
    # What a reply needs to find its way back as a provider's would: the send's key (our Message-ID, a call's
    # status callback), its provider id (a Slack thread) and the run's reply-to token (email).
    idem_key: str = ""
    provider_message_id: str = ""
    run_token: str = ""


@dataclass(frozen=True)
class Action:
    """Something a persona does at a virtual time: a written reply, a call report, or an SMS STOP."""

    at: datetime
    role: str
    kind: str  # inbound | call_report | stop
    channel: str
    sender: str
    text: str
    subject: str = ""
    attachments: tuple[dict, ...] = ()
    trait: str = ""
    language: str = ""
    # The message this answers (None: a message of the persona's own), and how the reply addresses it.
    answers: Outbound | None = None
    via: str = "direct"  # direct | thread (agents/config/schema_evals.py)
    # Set for a reply timed from the latest outreach: a newer action with the same key replaces this one.
    key: str = ""
    # The persona's nth message (simulator.personas numbers them as they are delivered); a redelivery keeps it.
    number: int | None = None
    redelivery: bool = False


class Persona(Protocol):
    """What a trait reads and calls on the persona it belongs to: simulator.personas.Persona.

    A protocol rather than that class, because the persona calls `react`: the traits sit below it.
    """

    role: str
    traits: list[dict]
    contact: dict
    zone: ZoneInfo
    calls_answered: int

    def reply(self, message: Outbound, *, at: datetime, text: str, trait: str, attachment: dict | None = None,
              channel: str | None = None, brief: str = "", via: str = "direct") -> Action: ...

    def day_of(self, at: datetime) -> int: ...

    def date_of_day(self, day: int) -> date: ...

    def away_on(self, at: datetime) -> bool: ...

    def add_business_days(self, at: datetime, days: int) -> datetime: ...

    def human_delay(self) -> timedelta: ...

    def typing_delay(self) -> timedelta: ...

    def auto_delay(self) -> timedelta: ...

    def call_length(self) -> timedelta: ...


def react(persona: Persona, trait: dict, message: Outbound) -> list[Action]:
    """The actions `trait` takes on `message`; traits that answer people stay quiet while out of office."""
    kind = trait["type"]
    if kind not in ("out_of_office", "replies_after", "sends_attachment") and persona.away_on(message.at):
        return []
    return _REACTIONS.get(kind, _nothing)(persona, trait, message)


def _replies_after(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    latest = trait.get("relative_to") == "latest"
    if message.outreach is None or (message.outreach != 0 and not latest):
        return []
    if trait.get("business_days") is not None:
        at = p.add_business_days(message.at, int(trait["business_days"]))
    else:
        # Calendar days keep the persona's local time of day across DST.
        local = message.at.astimezone(p.zone)
        at = (local + timedelta(days=float(trait["days"]))).astimezone(message.at.tzinfo)
    at = max(at, message.at + p.typing_delay())
    reply = p.reply(message, at=at, text=trait.get("text") or "", trait=trait["type"],
                    attachment=trait.get("attachment"), via=trait.get("via") or "direct")
    # From the latest outreach: each chasing message re-times the one reply (personas.Cast drops the older).
    return [replace(reply, key=f"{p.role}:{p.traits.index(trait)}")] if latest else [reply]


def _replies_on_followup(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if message.outreach != trait["n"]:
        return []
    return [p.reply(message, at=message.at + p.human_delay(), text=trait["text"], trait=trait["type"],
                    attachment=trait.get("attachment"), via=trait.get("via") or "direct")]


def _asks_for_channel(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if not _answers(trait, message):
        return []
    brief = f"{ASK_FOR_CHANNEL[trait['channel']]}, I rarely check {message.channel}."
    return [p.reply(message, at=message.at + p.human_delay(), text=trait.get("text") or "", brief=brief,
                    trait=trait["type"])]


def _out_of_office(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if p.day_of(message.at) >= trait["until_day"] or message.channel == "voice":
        return []
    back = p.date_of_day(trait["until_day"])
    brief = f"Automatic reply: I am out of the office until {back:%B} {back.day}."
    # An auto-responder answers at once, to every message, on the channel it came in on.
    return [p.reply(message, at=message.at + p.auto_delay(), text=trait.get("text") or "", brief=brief,
                    trait=trait["type"], channel=message.channel)]


def _replies_stop(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if not _answers(trait, message):
        return []
    at = message.at + p.human_delay()
    if p.contact.get("phone"):
        return [Action(at=at, role=p.role, kind="stop", channel="sms", sender=p.contact["phone"], text="STOP",
                       trait=trait["type"])]
    # No number to text STOP from: the persona says it in words where it was reached.
    return [p.reply(message, at=at, text="", brief="Please stop contacting me.", trait=trait["type"])]


def _redirects(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if not _answers(trait, message):
        return []
    text = (f"I'm not the right person for this. Please contact {trait['to_name']} at {trait['to_email']}, "
            "who handles it now.")
    return [p.reply(message, at=message.at + p.human_delay(), text=text, trait=trait["type"])]


def _prompt_injection(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if not _answers(trait, message):
        return []
    return [p.reply(message, at=message.at + p.human_delay(), text=trait["text"], trait=trait["type"])]


def _answers_call(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    if message.channel != "voice":
        return []
    # The call happens when it is placed; the provider's report arrives once it has ended.
    at = message.at + p.call_length()
    transcripts = trait.get("transcripts") or [trait["transcript"]]
    # The nth call answered says the nth transcript; the last one again after that.
    transcript = transcripts[min(p.calls_answered, len(transcripts) - 1)]
    p.calls_answered += 1
    return [Action(at=at, role=p.role, kind="call_report", channel="voice", sender=p.contact.get("phone", ""),
                   text=transcript, trait=trait["type"], answers=message)]


def _language(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    # Without text the trait only sets the language of the persona's other replies (Persona.language).
    if not trait.get("text") or message.outreach != 0:
        return []
    return [p.reply(message, at=message.at + p.human_delay(), text=trait["text"], trait=trait["type"])]


def _nothing(p: Persona, trait: dict, message: Outbound) -> list[Action]:
    return []


def _answers(trait: dict, message: Outbound) -> bool:
    """Message-triggered traits answer outreach `on_followup` (0, the first message, when unset)."""
    wanted = trait.get("on_followup")
    return message.outreach == (0 if wanted is None else wanted)


def attachment_entry(spec: dict | None, *, title: str) -> tuple[dict, ...]:
    if not spec:
        return ()
    return (documents.attachment(filename=spec["filename"], content_type=spec.get("content_type") or "application/pdf",
                                 text=spec.get("text") or "", title=title),)


_REACTIONS: dict[str, Callable[[Persona, dict, Outbound], list[Action]]] = {
    "replies_after": _replies_after,
    "sends_attachment": _replies_after,
    "replies_on_followup": _replies_on_followup,
    "asks_for_channel": _asks_for_channel,
    "out_of_office": _out_of_office,
    "replies_stop": _replies_stop,
    "silent": _nothing,
    "redirects": _redirects,
    "prompt_injection": _prompt_injection,
    "answers_call": _answers_call,
    "language": _language,
    # Acts on the persona's own messages as they are delivered (personas.Cast), not on what it receives.
    "redelivers": _nothing,
}
