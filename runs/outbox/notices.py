"""The escalation notices in the outbox: what runs.notifications tells an organization's ops team about an
escalation. No run and no lease (never counted against a contact's caps): each write is a short transaction on the
row itself.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from runs import clock
from runs.models import OutboxMessage, OutboxStatus
from runs.outbox.sends import lock_row

NOTICE_TOOL = "notify_escalation"


def notice_key(escalation_id: int, *, attempt: int, channel: str) -> str:
    """The same escalation, attempt and channel always give the same key, so a retried transaction or a
    second pass over the same escalation finds the row instead of queueing another notice."""
    return hashlib.sha256(f"escalation-notice|{escalation_id}|{attempt}|{channel}".encode()).hexdigest()


def open_notice(escalation_id: int, *, attempt: int, channel: str, recipient: str, payload: dict,
                not_before: datetime | None) -> OutboxMessage:
    """The pending notice for (escalation, attempt, channel), created when new; `not_before` holds it
    through the ops team's quiet hours."""
    message, _ = OutboxMessage.objects.get_or_create(
        idem_key=notice_key(escalation_id, attempt=attempt, channel=channel),
        defaults={"escalation_id": escalation_id, "tool": NOTICE_TOOL, "channel": channel, "recipient": recipient,
                  "ordinal": attempt, "payload": payload, "created_at": clock.wall_now(), "not_before": not_before},
    )
    return message


def claim_notices(*, batch: int) -> list[OutboxMessage]:
    """Due pending notices moved to `sending` (one more attempt) for this caller alone; SKIP LOCKED: another
    dispatcher holds those."""
    now = clock.wall_now()
    with transaction.atomic():
        rows = list(
            OutboxMessage.objects.select_for_update(no_key=True, skip_locked=True)
            .filter(escalation__isnull=False, status=OutboxStatus.PENDING)
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .order_by("not_before", "id")[:batch]
        )
        for row in rows:
            row.begin_send()
            row.attempted_at = now
            row.not_before = None
            row.save(update_fields=["status", "attempts", "attempted_at", "not_before"])
    return rows


def settle_notice(message: OutboxMessage, *, sent: bool = False, provider_message_id: str = "", error: str = "",
                  retry_at: datetime | None = None, uncertain: bool = False) -> OutboxMessage:
    """A claimed notice's outcome: sent; back to pending until `retry_at` (the provider certainly did not take
    it); uncertain (it may have gone out: never sent again); or failed for good."""
    with transaction.atomic():
        locked = lock_row(message)
        if locked.status != OutboxStatus.SENDING:
            return locked
        if sent:
            locked.mark_sent()
            locked.sent_at = clock.wall_now()
            locked.provider_message_id = provider_message_id[:200]
        elif retry_at is not None:
            locked.mark_not_sent()
            locked.not_before = retry_at
        elif uncertain:
            locked.mark_uncertain()
        else:
            locked.mark_failed()
        locked.error = error[:4000]
        locked.save(update_fields=["status", "sent_at", "provider_message_id", "not_before", "error"])
    return locked


def claim_stale_notices(*, attempted_before: datetime, batch: int) -> list[tuple[OutboxMessage, datetime]]:
    """Notices left `sending` since before `attempted_before` (their sender died between claim and settle),
    each with the time of that attempt; re-stamped now so no other dispatcher looks them up meanwhile."""
    now = clock.wall_now()
    with transaction.atomic():
        rows = list(
            OutboxMessage.objects.select_for_update(no_key=True, skip_locked=True)
            .filter(escalation__isnull=False, status=OutboxStatus.SENDING, attempted_at__lt=attempted_before)
            .order_by("attempted_at", "id")[:batch]
        )
        stale = [(row, row.attempted_at) for row in rows]
        for row in rows:
            row.attempted_at = now
            row.lookups += 1
            row.save(update_fields=["attempted_at", "lookups"])
    return stale
