"""What happened to one send, as the ToolExecutor reports it to the tool layer (and the model reads it).

Built from the outbox row alone, so a re-executed episode hands the model the same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runs.models import OutboxMessage


@dataclass(frozen=True)
class SendOutcome:
    """What happened to one send. status: sent | held | blocked | failed | uncertain | unavailable."""

    status: str
    message: str = ""
    outbox_id: int | None = None
    provider_message_id: str = ""
    # True when an earlier attempt had already sent it (or the provider confirmed it): nothing went out now.
    adopted: bool = False
    # A held send: its outbox row stays pending (or waits for its lookup) until then, and a flush episode
    # takes it up.
    held_until: datetime | None = None
    # An escalation is open for it; the run waits for a human.
    escalated: bool = False


def sent(message: OutboxMessage, *, adopted: bool) -> SendOutcome:
    return SendOutcome("sent", outbox_id=message.pk, provider_message_id=message.provider_message_id, adopted=adopted)


def failed(message: OutboxMessage) -> SendOutcome:
    return SendOutcome("failed", f"the {message.channel} message could not be delivered ({message.error}); "
                       "do not retry it on this channel", outbox_id=message.pk)


def uncertain(message: OutboxMessage) -> SendOutcome:
    return SendOutcome("uncertain", f"nobody can tell whether the {message.channel} message went out; a human "
                       "will check, do not send it again", outbox_id=message.pk, escalated=True)


def held(message: OutboxMessage, *, why: str = "the contact's send window or message cap") -> SendOutcome:
    return SendOutcome("held", f"held until {message.not_before.isoformat()} ({why}) and will be sent then; "
                       "do not send it again", outbox_id=message.pk, held_until=message.not_before)
