"""What a contact's memory (Contact.history, written by runs.contact_memory) means for the follow-up policy.

Pure functions over the history list. Entries are dicts with "kind":
- "preference" {"channel"}: the latest one picks the ladder's channel;
- "opt_out" {"channels"}: those channels are never used again ("opt_in" lifts them);
- "absence" {"until"}: no outreach before that instant (ISO datetime); "returned" ends earlier absences
  (the contact wrote back before the date);
- "address" {"channel", "old", "new"}: an address change (the old value is kept here).
"""

from __future__ import annotations

from datetime import datetime


def preferred_channel(history: list[dict]) -> str | None:
    """The channel the contact (or a human for them) asked for last, unless it was opted out since."""
    blocked = opted_out(history)
    for entry in reversed(history or []):
        if entry.get("kind") == "preference" and entry.get("channel"):
            return entry["channel"] if entry["channel"] not in blocked else None
    return None


def opted_out(history: list[dict]) -> set[str]:
    """Channels the contact must not be reached on."""
    blocked: set[str] = set()
    for entry in history or []:
        if entry.get("kind") == "opt_out":
            blocked |= set(entry.get("channels") or [])
        elif entry.get("kind") == "opt_in":
            blocked -= set(entry.get("channels") or [])
    return blocked


def absent_until(history: list[dict], *, now: datetime) -> datetime | None:
    """When the contact is back, if they are away at `now`; else None."""
    latest = None
    for entry in history or []:
        if entry.get("kind") == "returned":
            latest = None
        elif entry.get("kind") == "absence" and entry.get("until"):
            until = datetime.fromisoformat(entry["until"])
            if until > now and (latest is None or until > latest):
                latest = until
    return latest


def channel_for(history: list[dict], *, ladder_channel: str | None, allowed: list[str]) -> str | None:
    """The channel a follow-up uses: the contact's preference (when the agent may use it), else the ladder's,
    never an opted-out one (then the first allowed channel left, or None: nothing to use)."""
    if ladder_channel is None:  # the answer deadline after the last step: nothing to send on any channel
        return None
    blocked = opted_out(history)
    preferred = preferred_channel(history)
    if preferred and (not allowed or preferred in allowed):
        return preferred
    if ladder_channel not in blocked:
        return ladder_channel
    return next((channel for channel in allowed if channel not in blocked), None)
