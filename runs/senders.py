"""Who sent a message: the run contacts whose address or number is the sender's.

Both sides go through one normalization (connectors.addresses.normalize:
lower-cased email, E.164 number, Slack user id as given), so "Dana@Example.com"
and "+1 (555) 555-0101" find the contact stored as "dana@example.com" and
"+15555550101". A sender no contact matches is a stranger: whatever it sends
is shown to people but proves nothing about a task.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from connectors import addresses
from connectors.models import Channel

# Contact fields holding the address a channel's messages come from.
_FIELDS = {Channel.EMAIL: "email", Channel.SMS: "phone", Channel.VOICE: "phone", Channel.SLACK: "slack_user"}


def channel_of(sender: str, *, channel: str = "") -> str:
    """The channel whose address form `sender` has: the message's own channel, else guessed from its shape."""
    if channel in _FIELDS:
        return channel
    sender = sender.strip()
    if "@" in sender:
        return Channel.EMAIL
    if sender[:1] == "+" or (sender[:1].isdigit() and sender.replace(" ", "").replace("-", "").isdigit()):
        return Channel.SMS
    return Channel.SLACK


def roles_of(contacts: Iterable[Any], *, sender: str, channel: str = "") -> list[str]:
    """The roles of the contacts (Contact rows or dicts) the sender is; [] for a stranger or no sender."""
    kind = channel_of(sender, channel=channel)
    wanted = addresses.normalize(kind, sender)
    if not wanted:
        return []
    field = _FIELDS[kind]
    return [_get(contact, "role") for contact in contacts
            if addresses.normalize(kind, _get(contact, field) or "") == wanted]


def _get(contact: Any, name: str) -> Any:
    return contact.get(name) if isinstance(contact, dict) else getattr(contact, name)
