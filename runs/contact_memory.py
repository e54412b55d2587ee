"""Contact memory: the one writer of Contact.history and of a contact's addresses after the run starts.

Every change appends an entry {"kind", "at", "by", "why", ...} (runs.policy.memory reads them):
channel preferences, opt-outs, address changes (the old address is kept in the
entry) and absences with a return date. `by` is who decided: a human
({"user_id", "key_id", "via"}) or the contact themself ({"contact": rule}).
Callers hold the run row lock (a lease fence or an answer's transaction).

A contact writing "email me instead" / "text me" sets the preference without a
human (`learn_from_reply`, run on inbound episodes), journaled with the rule that fired.
"""

from __future__ import annotations

import re
from datetime import datetime

from connectors import addresses
from runs import episode_records, senders
from runs.context import EpisodeContext
from runs.models import Contact, EpisodeKind, JournalKind

ADDRESS_FIELDS = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}
CHANNELS = tuple(ADDRESS_FIELDS)

# (rule name, pattern, channel): what a contact writes to move their follow-ups to another channel.
PREFERENCE_RULES = (
    ("email_instead", re.compile(r"\b(e-?mail me|send (me )?an? e-?mail|contact me by e-?mail|use (my )?e-?mail)\b",
                                 re.IGNORECASE), "email"),
    ("text_instead", re.compile(r"\b(text me|sms me|send (me )?an? (text|sms)|message me on my (cell|mobile))\b",
                                re.IGNORECASE), "sms"),
    ("call_instead", re.compile(r"\b(call me|phone me|give me a (call|ring))\b", re.IGNORECASE), "voice"),
    ("slack_instead", re.compile(r"\b(slack me|message me on slack|ping me on slack)\b", re.IGNORECASE), "slack"),
)


def remember(contact: Contact, *, kind: str, at: datetime, by: dict, why: str, **fields: object) -> dict:
    """Append one entry and save the contact; returns the entry."""
    entry = {"kind": kind, "at": at.isoformat(), "by": by, "why": why, **fields}
    contact.history = [*(contact.history or []), entry]
    contact.save(update_fields=["history"])
    return entry


def set_preference(contact: Contact, *, channel: str, at: datetime, by: dict, why: str) -> dict:
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}")
    return remember(contact, kind="preference", at=at, by=by, why=why, channel=channel)


def opt_out(contact: Contact, *, channels: list[str], at: datetime, by: dict, why: str) -> dict:
    return remember(contact, kind="opt_out", at=at, by=by, why=why, channels=sorted(set(channels)))


def set_absence(contact: Contact, *, until: datetime, at: datetime, by: dict, why: str) -> dict:
    return remember(contact, kind="absence", at=at, by=by, why=why, until=until.isoformat())


def change_address(contact: Contact, *, channel: str, address: str, at: datetime, by: dict, why: str) -> dict:
    """Make `address` the contact's address on `channel`; the old one stays in the history entry.

    Raises ValueError for an address that does not normalize on the channel.
    """
    field_name = ADDRESS_FIELDS.get(channel)
    if field_name is None:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}")
    normalized = addresses.normalize(channel, address)
    if not normalized:
        raise ValueError(f"{address!r} is not a valid {channel} address")
    old = getattr(contact, field_name)
    setattr(contact, field_name, normalized)
    contact.save(update_fields=[field_name])
    return remember(contact, kind="address", at=at, by=by, why=why, channel=channel, old=old, new=normalized)


def preference_in(text: str) -> tuple[str, str] | None:
    """(rule, channel) when the text asks to be contacted on another channel, else None."""
    for rule, pattern, channel in PREFERENCE_RULES:
        if pattern.search(text or ""):
            return rule, channel
    return None


def learn_from_reply(ctx: EpisodeContext) -> dict | None:
    """On an inbound episode: record the channel the sender asks for, journaled with the rule that fired.

    Returns the entry, or None. A re-executed episode finds its entry and adds nothing.
    """
    episode = ctx.episode
    payload = episode.payload or {}
    if episode.kind != EpisodeKind.INBOUND:
        return None
    text = str(payload.get("text") or "")
    found = preference_in(text)
    sender = next(iter(senders.roles_of(ctx.contacts, sender=str(payload.get("from") or ""),
                                        channel=payload.get("channel") or "")), None)
    contact = next((c for c in ctx.contacts if c.role == sender), None)
    if found is None or contact is None:
        return None
    rule, channel = found
    with ctx.fence():
        locked = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        if any(entry.get("episode_id") == episode.pk for entry in locked.history or []):
            return None
        entry = remember(locked, kind="preference", at=ctx.now, by={"contact": contact.role, "rule": rule},
                         why=f"the contact wrote {text[:200]!r}", channel=channel, episode_id=episode.pk)
    contact.history = locked.history
    episode_records.record(ctx, JournalKind.NOTE, {"runtime": True, "contact_memory": "preference", "rule": rule,
                                         "contact": contact.role, "channel": channel})
    return entry
