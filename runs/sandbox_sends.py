"""TEMPORARY sandbox send path for outbound tools, until the ToolExecutor lands.

runs/tool_executor.py (with real connectors) replaces this module. What it
already gets right and the replacement must keep: the idempotency key comes
from runtime state only (DESIGN §6 Tools), the outbox row is found again by a
re-executed episode (sent → adopt, never a second row; the first payload
stands), and every write is fenced. Nothing leaves the process: the
"provider" is a deterministic sandbox id derived from the key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from runs.models import Contact, OutboxMessage, OutboxStatus

SANDBOX_PROVIDER = "sandbox"


@dataclass(frozen=True)
class SendResult:
    outbox_id: int
    status: str
    provider_message_id: str
    # True when an earlier attempt of this episode already sent it: adopted, not sent again.
    adopted: bool


def normalize_recipient(channel: str, contact: Contact) -> str:
    """The contact's address on `channel`, normalized so one person has one key; '' when it has none."""
    if channel == "email":
        return contact.email.strip().lower()
    if channel in ("sms", "voice"):
        digits = re.sub(r"[^\d]", "", contact.phone)
        return f"+{digits}" if digits else ""
    if channel == "slack":
        return contact.slack_user.strip()
    return ""


def idem_key(*, run_id: int, episode_id: int, task_key: str, tool: str, recipient: str, ordinal: int) -> str:
    parts = (str(run_id), str(episode_id), task_key, tool, recipient, str(ordinal))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def send(ctx: Any, *, tool: str, channel: str, contact: Contact, payload: dict, task_key: str,
         ordinal: int) -> SendResult:
    """Record the send in the outbox and mark it sent through the sandbox; fenced, idempotent by key."""
    recipient = normalize_recipient(channel, contact)
    key = idem_key(run_id=ctx.run_id, episode_id=ctx.episode.pk, task_key=task_key, tool=tool,
                   recipient=recipient, ordinal=ordinal)
    with ctx.fence():
        message, created = OutboxMessage.objects.get_or_create(
            idem_key=key,
            defaults={"run_id": ctx.run_id, "episode_id": ctx.episode.pk, "task_key": task_key, "tool": tool,
                      "channel": channel, "recipient": recipient, "ordinal": ordinal, "payload": payload,
                      "created_at": ctx.now},
        )
        if message.status == OutboxStatus.SENT:
            return SendResult(message.pk, message.status, message.provider_message_id, adopted=True)
        if message.status not in (OutboxStatus.PENDING, OutboxStatus.SENDING):
            # failed/uncertain belong to a human or the real executor; never resend from here.
            return SendResult(message.pk, message.status, message.provider_message_id, adopted=not created)
        message.begin_send()
        message.save(update_fields=["status", "attempts"])
    # The sandbox stores the key with the message, so "sending again" after a crash is the same message.
    provider_id = f"{SANDBOX_PROVIDER}-{key[:24]}"
    with ctx.fence():
        message = OutboxMessage.objects.get(pk=message.pk)
        if message.status == OutboxStatus.SENDING:
            message.mark_sent()
            message.provider_message_id = provider_id
            message.sent_at = ctx.now
            message.save(update_fields=["status", "provider_message_id", "sent_at"])
    return SendResult(message.pk, message.status, message.provider_message_id, adopted=not created)
