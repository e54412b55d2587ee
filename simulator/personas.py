"""Personas: the simulated contacts of one eval case, and what they do when the run writes to them.

Scripted by default: every reply follows the case's traits (simulator.persona_traits),
with the few random choices (names, reply delays) from one seeded rng, so
the same seed gives the same transcript. When the plan's model is OpenAI, a
reply whose trait gives no text is written by that model from a brief of
what the persona must say; a trait's own text is always used verbatim,
because the case's expectations were written against it.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import date, datetime, timedelta
from itertools import count
from zoneinfo import ZoneInfo

from connectors import addresses
from runs.llm import providers
from runs.llm.base import ChatRequest, ModelError
from simulator.persona_traits import Action, Outbound, attachment_entry, react

logger = logging.getLogger(__name__)

SANDBOX_DOMAIN = "sim.lucia.test"
CHASE_KINDS = ("start", "followup", "human_answer", "event")
FIRST_NAMES = ("Alex", "Jordan", "Morgan", "Riley", "Casey", "Avery", "Jamie", "Quinn", "Robin", "Taylor")
LAST_NAMES = ("Nguyen", "Okafor", "Lindqvist", "Moreau", "Silva", "Kowalski", "Haddad", "Tanaka", "Brennan")
DEFAULT_REPLY = {True: "Here it is, attached.", False: "Thanks for the reminder, noted."}

# (persona, brief of what to say, the message answered) -> reply text, or None to use the brief itself.
Writer = Callable[["Persona", str, Outbound], "str | None"]


class Persona:
    def __init__(self, role: str, *, spec: dict, contact: dict, start: datetime, rng: random.Random,
                 writer: Writer | None = None) -> None:
        self.role = role
        self.traits: list[dict] = list(spec.get("traits") or [])
        self.contact = contact
        self.zone = ZoneInfo(contact["timezone"])
        self.start = start
        self.rng = rng
        self.writer = writer
        self.language = next((t["code"] for t in self.traits if t["type"] == "language"), "")
        # Message number -> delay before the provider delivers it a second time (`redelivers` traits).
        self.redeliveries = {t.get("message", 0): timedelta(seconds=t.get("after", 300))
                             for t in self.traits if t["type"] == "redelivers"}
        self.calls_answered = 0
        # The newest message received on each channel: what a reply written on another channel answers.
        self.last_received: dict[str, Outbound] = {}
        self.messages_sent = 0
        # Keys of replies timed from the latest outreach that were delivered: such a reply is given once.
        self.spent_keys: set[str] = set()
        self._outreach = 0

    def hear(self, *, id: int, channel: str, tool: str, at: datetime, payload: dict, episode_kind: str,
             idem_key: str = "", provider_message_id: str = "", run_token: str = "") -> list[Action]:
        """React to one sent message; chasing messages are numbered, answers to the persona are not."""
        outreach = None
        if episode_kind in CHASE_KINDS:
            outreach, self._outreach = self._outreach, self._outreach + 1
        text = payload.get("body") or payload.get("text") or payload.get("brief") or ""
        message = Outbound(id=id, channel=channel, tool=tool, at=at, subject=payload.get("subject") or "",
                           text=text, outreach=outreach, idem_key=idem_key, provider_message_id=provider_message_id,
                           run_token=run_token)
        actions = [action for trait in self.traits for action in react(self, trait, message)]
        self.last_received[channel] = message
        return [action for action in actions if action.key not in self.spent_keys]

    def delivered(self, action: Action) -> tuple[Action, Action | None]:
        """`action` numbered as the persona's nth message, and its redelivery when the provider sends it twice."""
        if action.redelivery:
            return action, None
        if action.key:
            self.spent_keys.add(action.key)
        number, self.messages_sent = self.messages_sent, self.messages_sent + 1
        action = replace(action, number=number, key="")
        if number not in self.redeliveries:
            return action, None
        return action, replace(action, at=action.at + self.redeliveries[number], redelivery=True)

    def reply(self, message: Outbound, *, at: datetime, text: str, trait: str, attachment: dict | None = None,
              channel: str | None = None, brief: str = "", via: str = "direct") -> Action:
        """A written answer to `message`, on its channel unless that cannot carry it (a call, a file by SMS)."""
        channel = channel or self._reply_channel(message.channel, with_file=bool(attachment))
        answers = message if channel == message.channel else self.last_received.get(channel)
        if not text:
            brief = brief or DEFAULT_REPLY[bool(attachment)]
            text = (self.writer(self, brief, message) if self.writer else None) or brief
        subject = ""
        if channel == "email":
            original = (answers or message).subject
            subject = original if original.lower().startswith("re:") else f"Re: {original}"
        return Action(at=at, role=self.role, kind="inbound", channel=channel, sender=self.address(channel),
                      text=text, subject=subject.strip(), trait=trait, language=self.language,
                      attachments=attachment_entry(attachment, title=f"{self.contact['name']}: {trait}"),
                      answers=answers, via=via)

    def address(self, channel: str) -> str:
        field = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}[channel]
        return self.contact.get(field) or ""

    def _reply_channel(self, channel: str, *, with_file: bool) -> str:
        if channel == "voice" or (with_file and channel == "sms"):
            for candidate in ("email", "slack", "sms"):
                if self.address(candidate) and not (with_file and candidate == "sms"):
                    return candidate
        return channel

    # Calendar: days count from the run's start in the start's zone (day 0 = the start date).

    def day_of(self, at: datetime) -> int:
        return (at.astimezone(self.start.tzinfo).date() - self.start.date()).days

    def date_of_day(self, day: int) -> date:
        return self.start.date() + timedelta(days=day)

    def away_on(self, at: datetime) -> bool:
        return any(t["type"] == "out_of_office" and self.day_of(at) < t["until_day"] for t in self.traits)

    def add_business_days(self, at: datetime, days: int) -> datetime:
        local = at.astimezone(self.zone)
        while days > 0:
            local += timedelta(days=1)
            days -= local.weekday() < 5
        return local.astimezone(at.tzinfo)

    # Delays: people take a while, auto-responders and call reports do not.

    def human_delay(self) -> timedelta:
        return timedelta(seconds=self.rng.randint(20 * 60, 3 * 3600))

    def typing_delay(self) -> timedelta:
        return timedelta(seconds=self.rng.randint(2 * 60, 10 * 60))

    def auto_delay(self) -> timedelta:
        return timedelta(seconds=self.rng.randint(30, 120))

    def call_length(self) -> timedelta:
        return timedelta(seconds=self.rng.randint(90, 360))


class Cast:
    """Every persona of a case, the addresses that reach them, and their pending actions in time order."""

    def __init__(self, personas: list[Persona]) -> None:
        self.personas = {persona.role: persona for persona in personas}
        self._by_address: dict[tuple[str, str], Persona] = {}
        for persona in personas:
            for channel in ("email", "sms", "voice", "slack"):
                if address := persona.address(channel):
                    self._by_address[(channel, normalize(channel, address))] = persona
        self._pending: list[tuple[datetime, int, Action]] = []
        self._order = count()
        # Action key -> the order of its newest version: an older one is dropped when it comes due.
        self._newest: dict[str, int] = {}

    def contacts(self) -> list[dict]:
        return [dict(persona.contact, role=role) for role, persona in self.personas.items()]

    def role_of(self, channel: str, recipient: str) -> str | None:
        persona = self._by_address.get((channel, normalize(channel, recipient)))
        return persona.role if persona else None

    def hear(self, sent: Iterable[dict]) -> None:
        """Hand each sent message (OutboxMessage values, oldest first) to the persona it was addressed to."""
        for row in sent:
            persona = self._by_address.get((row["channel"], normalize(row["channel"], row["recipient"])))
            if persona is None:
                continue  # not a persona's address: the expectations report it, nobody answers
            for action in persona.hear(id=row["id"], channel=row["channel"], tool=row["tool"], at=row["sent_at"],
                                       payload=row["payload"] or {}, episode_kind=row["episode__kind"] or "",
                                       idem_key=row.get("idem_key") or "", run_token=row.get("run_token") or "",
                                       provider_message_id=row.get("provider_message_id") or ""):
                self._push(action)

    def next_at(self) -> datetime | None:
        self._drop_replaced()
        return self._pending[0][0] if self._pending else None

    def pop_due(self, now: datetime) -> list[Action]:
        """The actions due by `now`, in time order; each counts as delivered (a redelivery may follow)."""
        due = []
        while self._drop_replaced() and self._pending[0][0] <= now:
            popped = heapq.heappop(self._pending)[2]
            action, again = self.personas[popped.role].delivered(popped)
            due.append(action)
            if again is not None:
                self._push(again)
        return due

    def _push(self, action: Action) -> None:
        order = next(self._order)
        if action.key:
            self._newest[action.key] = order
        heapq.heappush(self._pending, (action.at, order, action))

    def _drop_replaced(self) -> bool:
        """Drop replaced actions from the front; True while something is pending."""
        while self._pending:
            _, order, action = self._pending[0]
            if not action.key or self._newest.get(action.key) == order:
                return True
            heapq.heappop(self._pending)
        return False


def cast_for(plan: dict, case: dict, *, start: datetime, rng: random.Random, token: str, default_tz: str,
             writer: Writer | None = None) -> Cast:
    """The case's personas with contact details; unset details are made up on the sandbox domain.

    `token` makes every address unique to this run: the organization's caps
    and suppressions are keyed by address, and one simulated person must not
    inherit another simulation's history. A phone number the case gives is
    kept as written (a number has no room for a tag).
    """
    personas = []
    for index, (role, spec) in enumerate(sorted((case.get("personas") or {}).items())):
        contact = {
            "name": spec.get("name") or f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
            "email": _tagged(spec.get("email"), token) or f"{role.replace('_', '-')}.{token}@{SANDBOX_DOMAIN}",
            "phone": spec.get("phone") or f"+1555{(int(token, 16) * 7 + index) % 10_000_000:07d}",
            "slack_user": f"{spec['slack_user']}+sim-{token}" if spec.get("slack_user") else f"U{token.upper()}{index}",
            "timezone": spec.get("timezone") or default_tz,
        }
        personas.append(Persona(role, spec=spec, contact=contact, start=start, rng=rng, writer=writer))
    return Cast(personas)


def llm_writer(plan: dict) -> Writer | None:
    """A persona voice from the plan's model when it is OpenAI; None for the scripted model."""
    if providers.provider_name(plan) != "openai":
        return None
    provider, model = providers.provider_for(plan), providers.model_name(plan)

    def write(persona: Persona, brief: str, message: Outbound) -> str | None:
        language = f" Write in the language with code {persona.language}." if persona.language else ""
        system = (f"You are {persona.contact['name']}, the {persona.role.replace('_', ' ')} in a business exchange."
                  f" Reply to the message below in one to three sentences, in character, saying: {brief}"
                  f"{language} Output only the reply text.")
        request = ChatRequest(model=model, temperature=0.7, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": message.text[:4000]}])
        try:
            return (provider.complete(request).content or "").strip() or None
        except ModelError as failure:
            logger.warning("persona %s: model failed (%s); using the scripted text", persona.role, failure)
            return None

    return write


def normalize(channel: str, address: str) -> str:
    return addresses.normalize(channel, address)


def _tagged(email: str | None, token: str) -> str:
    """name@domain → name+sim-<token>@domain: still the author's address, but this run's alone."""
    if not email:
        return ""
    local, _, domain = email.partition("@")
    return f"{local}+sim-{token}@{domain}"
