"""Provider tracking events for our sends: store them, and suppress addresses that must not be tried again.

A DeliveryEvent carrying an idempotency key is also proof the provider accepted
that send (Connector.lookup reads it through base.recorded_delivery).
"""

from __future__ import annotations

from agents.models import Organization
from connectors import inbound, suppressions
from connectors.base import ParsedInbound
from connectors.models import Channel, DeliveryEvent, Suppression, SuppressionReason

# Twilio error codes that say the number is lost to us: 21610 the recipient texted STOP,
# 21211 the number is invalid.
TWILIO_SUPPRESSING_ERRORS = {"21610": SuppressionReason.STOP, "21211": SuppressionReason.INVALID}
# anymail's normalized event types (Mailgun "failed" with permanent severity arrives as bounced).
EMAIL_SUPPRESSING_EVENTS = {
    "bounced": SuppressionReason.BOUNCE,
    "complained": SuppressionReason.COMPLAINT,
    "unsubscribed": SuppressionReason.STOP,
}
# anymail reject reasons meaning the ESP already refuses the address.
EMAIL_SUPPRESSING_REJECTS = {
    "bounced": SuppressionReason.BOUNCE, "invalid": SuppressionReason.INVALID,
    "spam": SuppressionReason.COMPLAINT, "unsubscribed": SuppressionReason.STOP,
}
FAILED_STATUSES = {"failed", "undelivered", "bounced", "rejected", "complained", "busy", "no-answer", "canceled"}


def record(parsed: ParsedInbound, *, channel: str) -> DeliveryEvent | None:
    """Store one tracking event; None when this event was already stored (the provider retried)."""
    event, created = DeliveryEvent.objects.get_or_create(
        channel=channel,
        provider_event_id=parsed.provider_id[:255],
        defaults={
            "provider_message_id": (parsed.provider_message_id or "")[:255],
            "idem_key": (parsed.idem_key or "")[:64],
            "event_type": (parsed.status or "unknown")[:32],
            "raw": inbound.without_nul({**parsed.raw, "lucia": parsed.headers}),
        },
    )
    return event if created else None


def suppress_if_lost(parsed: ParsedInbound, *, channel: str, organization: Organization) -> Suppression | None:
    """Suppress the recipient when the event says it can never be reached (opted out, bounced, complained)."""
    reason = suppression_reason(parsed, channel=channel)
    if reason is None:
        return None
    return suppressions.suppress(organization, channel=channel, address=recipient_of(parsed, channel=channel),
                                 reason=reason)


def suppression_reason(parsed: ParsedInbound, *, channel: str) -> str | None:
    if channel in (Channel.SMS, Channel.VOICE):
        return TWILIO_SUPPRESSING_ERRORS.get(str(parsed.headers.get("error_code") or ""))
    if channel == Channel.EMAIL:
        if parsed.status == "rejected":
            return EMAIL_SUPPRESSING_REJECTS.get(str(parsed.headers.get("reject_reason") or ""))
        return EMAIL_SUPPRESSING_EVENTS.get(parsed.status or "")
    return None


def recipient_of(parsed: ParsedInbound, *, channel: str) -> str:
    """The address our send went to. SMS status posts keep Twilio's To; the email and voice
    connectors already put the other party in from_address."""
    return parsed.to_address if channel == Channel.SMS else parsed.from_address


def is_failure(parsed: ParsedInbound) -> bool:
    return (parsed.status or "") in FAILED_STATUSES
