"""What the scripted model reads: the request's facts and the tool calls it already made in the episode.

Below both the model (runs.llm.scripted) and its rules (runs.llm.scripted_rules), which read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from connectors import addresses
from runs.llm.base import ChatRequest

SEND_TOOLS = {"email": "send_email", "sms": "send_sms", "slack": "send_slack", "voice": "place_call"}


@dataclass(frozen=True)
class Done:
    """A tool call made earlier in this episode, with what the runtime answered."""

    name: str
    # The arguments as the assistant message carries them (JSON text, or already a dict).
    written: str | dict
    result: object
    ok: bool

    @cached_property
    def arguments(self) -> dict:
        """The arguments, parsed when first read: only the rules that look back at the history read them."""
        return parse_json(self.written)


def parse_json(value: object) -> object:
    """The JSON value `value` spells; `value` itself when it is not text, or not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


class Facts:
    """Typed reads over the request's metadata, tolerant of missing keys."""

    def __init__(self, request: ChatRequest) -> None:
        meta = request.metadata or {}
        self.meta = meta
        self.event: dict = meta.get("event") or {}
        self.kind: str = self.event.get("kind") or ""
        self.text: str = self.event.get("text") or ""
        self.attachments: list[dict] = self.event.get("attachments") or []
        self.tasks: list[dict] = meta.get("tasks") or []
        self.contacts: list[dict] = meta.get("contacts") or []
        self.hints: dict = meta.get("scripted") or {}
        self.tools: set[str] = set(meta.get("tools") or request.tool_names())
        self.followup_channel: str = meta.get("followup_channel") or "email"
        self.capabilities: list[str] = meta.get("capabilities") or []
        self.human_answers: list = meta.get("human_answers") or []
        self.now = _parse_datetime(meta.get("now"))

    def open_tasks(self, *, role: str | None = None) -> list[dict]:
        """Open tasks, required ones first, optionally only those of one contact role."""
        found = [task for task in self.tasks if task.get("status", "open") == "open"
                 and (role is None or task.get("contact_role") in (None, role))]
        return sorted(found, key=lambda task: not task.get("required", True))

    def task(self, key: str | None) -> dict | None:
        return next((task for task in self.tasks if task.get("key") == key), None)

    def contact(self, role: str | None) -> dict:
        found = next((contact for contact in self.contacts if contact.get("role") == role), None)
        return found or (self.contacts[0] if self.contacts else {"role": role or ""})

    def known_addresses(self) -> set[str]:
        known = set()
        for contact in self.contacts:
            known.add(addresses.normalize_email(contact.get("email") or ""))
            known.add(addresses.normalize_phone(contact.get("phone") or "").lstrip("+"))
        return known - {""}

    def channel_for(self, contact: dict, *, preferred: str | None) -> str | None:
        """The first usable channel: preferred, the policy's, the contact's, the agent's; None when none has a tool."""
        reachable = contact.get("channels") or []
        for channel in (preferred, self.followup_channel, *reachable, *self.capabilities, "email"):
            if channel and SEND_TOOLS.get(channel) in self.tools and (not reachable or channel in reachable):
                return channel
        return None


def _parse_datetime(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
