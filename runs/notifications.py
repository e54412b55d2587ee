"""Escalations find their human: notices to the organization's ops team (EscalationRoute).

Every escalation is created with `notify_at` set (a simulated run's excepted).
The dispatcher's pass takes the due ones (escalations.take_due_notices: the
first notice, then one more `escalation_sla` after the first reached the
team) and, in the same transaction, queues one outbox row per
channel of the route, keyed by escalation id + attempt + channel: a retried
transaction or a second dispatcher finds the row and queues nothing more.
A notice falling in the ops team's quiet hours is held (`not_before`), not
dropped. Notices have no run: no contact's caps count them and no ladder sees
them as outreach. Sending is the same pass's second half, a few rows at a time;
a notice whose sender died mid-send is looked up at the provider before it
is ever sent again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from connectors import registry
from connectors.base import OutboundMessage
from connectors.errors import ConnectorError
from connectors.models import Channel, Identity
from runs import clock, escalations, outbox
from runs.models import Escalation, EscalationRoute, OutboxMessage

logger = logging.getLogger(__name__)

ANNOUNCE_BATCH = 100
SEND_BATCH = 5
# A provider that refused a notice for now is asked again after this, up to MAX_ATTEMPTS times.
RETRY_AFTER = timedelta(minutes=1)
MAX_ATTEMPTS = 10
# A notice `sending` this long past the provider's settle window lost its sender (a live one gives up within
# its request timeout): look it up.
STALE_SENDING = timedelta(minutes=5)
# Options a click cannot answer: they need words, an address or a channel only the Studio form takes (besides
# any option marked needs_text).
STUDIO_ONLY_OPTIONS = frozenset({"reply_to_contact", "guide_agent", "use_contact", "switch_channel"})
# Slack allows 25 elements in an actions block; one is the Studio link.
MAX_BUTTONS = 24
BUTTON_ACTION = "lucia_answer"


def notify_due(*, budget_s: float) -> int:
    """Queue the due notices, then send the due ones until the budget is spent. Returns notices sent."""
    deadline = time.monotonic() + budget_s
    announce_due()
    look_up_stale()
    sent = 0
    # At least one batch, however small the budget: a pass always moves the oldest notices on.
    while rows := outbox.claim_notices(batch=SEND_BATCH):
        sent += sum(_deliver(row) for row in rows)
        if time.monotonic() >= deadline:
            break
    return sent


def announce_due(*, batch: int = ANNOUNCE_BATCH) -> int:
    """Queue one notice per route channel for every open escalation whose next notice is due; returns rows."""
    with transaction.atomic():
        due = escalations.take_due_notices(batch=batch)
        routes = {route.organization_id: route for route in EscalationRoute.objects.filter(
            organization_id__in={escalation.organization_id for escalation in due})}
        queued, now = 0, clock.wall_now()
        for escalation in due:
            route = routes.get(escalation.organization_id)
            held = quiet_until(route, now=now) if route is not None else None
            if route is not None:
                queued += len(queue(escalation, route=route, attempt=escalation.notices_queued + 1, held=held))
            escalations.notice_queued(escalation, delivered_from=held or now)
    return queued


def look_up_stale(*, batch: int = SEND_BATCH) -> int:
    """Settle notices whose sender died mid-send by asking the provider: found, sent; not found, sent again
    by the next claim; unknowable, uncertain (never sent twice). Returns how many were looked up."""
    attempted_before = clock.wall_now() - timedelta(seconds=settings.LUCIA_SEND_SETTLE_SECONDS) - STALE_SENDING
    stale = outbox.claim_stale_notices(attempted_before=attempted_before, batch=batch)
    for row, attempted_at in stale:
        try:
            looked = registry.connector_for(_identity(row)).lookup(_message(row), sent_after=attempted_at)
        except Exception as exc:  # a vanished identity or a bug: this row only, and not forever
            logger.exception("escalation notice %s: lookup failed", row.pk)
            if row.lookups >= MAX_ATTEMPTS:
                outbox.settle_notice(row, uncertain=True, error=f"lookup failed: {exc.__class__.__name__}: {exc}")
            continue
        if looked.found:
            outbox.settle_notice(row, sent=True, provider_message_id=looked.provider_message_id or "")
        elif looked.found is False:
            outbox.settle_notice(row, retry_at=clock.wall_now(), error="not found by the provider; sent again")
        elif not looked.transient or row.lookups >= MAX_ATTEMPTS:
            outbox.settle_notice(row, uncertain=True, error="the provider cannot say whether it was sent")
    return len(stale)


def queue(escalation: Escalation, *, route: EscalationRoute, attempt: int,
          held: datetime | None) -> list[OutboxMessage]:
    """The notice rows of one attempt, one per channel the route names; `held`: not sent before then."""
    text = notice_text(escalation, attempt=attempt)
    rows = []
    if route.email_identity_id and route.email_to:
        rows.append(outbox.open_notice(
            escalation.pk, attempt=attempt, channel=Channel.EMAIL, recipient=route.email_to.lower(), not_before=held,
            payload={"identity_id": route.email_identity_id, "subject": notice_subject(escalation, attempt=attempt),
                     "body": text}))
    if route.slack_identity_id and route.slack_channel:
        rows.append(outbox.open_notice(
            escalation.pk, attempt=attempt, channel=Channel.SLACK, recipient=route.slack_channel, not_before=held,
            payload={"identity_id": route.slack_identity_id, "body": text, "blocks": slack_blocks(escalation, text)}))
    return rows


def quiet_until(route: EscalationRoute, *, now: datetime) -> datetime | None:
    """When the ops team's quiet hours end, if `now` falls in them; None otherwise."""
    start, end = route.quiet_start, route.quiet_end
    if start is None or end is None or start == end:
        return None
    try:
        zone = ZoneInfo(route.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    local = now.astimezone(zone)
    at = local.time().replace(tzinfo=None)
    inside = start <= at < end if start < end else (at >= start or at < end)
    if not inside:
        return None
    day = local.date() if at < end else local.date() + timedelta(days=1)
    return datetime.combine(day, end, tzinfo=zone).astimezone(now.tzinfo)


def studio_url(escalation_id: int) -> str:
    return settings.LUCIA_PUBLIC_URL.rstrip("/") + reverse("admin:runs_escalation_change", args=[escalation_id])


def options_of(escalation: Escalation) -> list[dict]:
    """The escalation's options as {"name", "label", "in_studio"}; plain strings (older rows) name themselves.
    `in_studio`: a click cannot answer it (it needs text or data a button does not carry)."""
    options = []
    for option in escalation.options or []:
        if isinstance(option, dict) and option.get("name"):
            name = str(option["name"])
            options.append({"name": name, "label": str(option.get("label") or name),
                            "in_studio": bool(option.get("needs_text")) or name in STUDIO_ONLY_OPTIONS})
        elif isinstance(option, str) and option:
            options.append({"name": option, "label": option, "in_studio": option in STUDIO_ONLY_OPTIONS})
    return options


def notice_subject(escalation: Escalation, *, attempt: int) -> str:
    still = "Still waiting: " if attempt > 1 else ""
    return f"{still}{escalation.get_kind_display()} (escalation #{escalation.pk})"[:200]


def notice_text(escalation: Escalation, *, attempt: int) -> str:
    lines = [notice_subject(escalation, attempt=attempt), ""]
    if escalation.run_id is not None:
        lines.append(f"Run #{escalation.run_id}: {escalation.run.goal[:300]}")
    lines += [escalation.prompt[:2000], ""]
    options = options_of(escalation)
    if options:
        lines.append("Answers: " + ", ".join(option["label"] for option in options))
    lines.append(f"Answer it in the Studio: {studio_url(escalation.pk)}")
    return "\n".join(lines)


def slack_blocks(escalation: Escalation, text: str) -> list[dict]:
    """The notice as Block Kit: the text, then one button per option (value "<escalation id>:<option name>",
    which the interactions webhook answers) and a link to the Studio."""
    buttons = [
        {"type": "button", "action_id": f"{BUTTON_ACTION}:{option['name']}"[:255],
         "text": {"type": "plain_text", "text": option["label"][:75]},
         "value": f"{escalation.pk}:{option['name']}"[:2000]}
        for option in options_of(escalation)[:MAX_BUTTONS]
    ]
    buttons.append({"type": "button", "action_id": "lucia_open_studio", "url": studio_url(escalation.pk),
                    "text": {"type": "plain_text", "text": "Open in the Studio"}})
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {"type": "actions", "block_id": f"lucia_escalation_{escalation.pk}", "elements": buttons},
    ]


def _deliver(row: OutboxMessage) -> bool:
    """Send one claimed notice and settle its row; True when it went out."""
    try:
        result = registry.connector_for(_identity(row)).send(_message(row))
    except ConnectorError as exc:
        if exc.outcome_unknown:
            # It may have gone out: never sent twice; the row shows it in the Studio's outbox.
            outbox.settle_notice(row, uncertain=True, error=str(exc))
        elif exc.permanent or row.attempts >= MAX_ATTEMPTS:
            outbox.settle_notice(row, error=str(exc))
        else:
            outbox.settle_notice(row, retry_at=clock.wall_now() + RETRY_AFTER, error=str(exc))
        logger.warning("escalation notice %s (%s) not sent: %s", row.pk, row.channel, exc)
        return False
    except Exception as exc:  # a bug or a vanished identity: this row only, never the pass
        logger.exception("escalation notice %s failed", row.pk)
        outbox.settle_notice(row, error=f"{exc.__class__.__name__}: {exc}")
        return False
    outbox.settle_notice(row, sent=True, provider_message_id=result.provider_message_id)
    return True


def _message(row: OutboxMessage) -> OutboundMessage:
    return OutboundMessage(
        idem_key=row.idem_key, channel=row.channel, to=row.recipient, body=row.payload.get("body", ""),
        subject=row.payload.get("subject"), blocks=row.payload.get("blocks") or [],
    )


def _identity(row: OutboxMessage) -> Identity:
    # The identity must still be the escalation's organization's and live.
    return Identity.objects.get(pk=row.payload.get("identity_id"), organization__escalations=row.escalation_id,
                                channel=row.channel, active=True)
