"""What a verified webhook's items do: store first, then suppress, record delivery, or route to a run.

Each item is handled in one transaction: the InboundMessage, the Episode and
the advance_run queue row commit together, so a crash leaves the provider's
retry to redo it all, and a repeated delivery finds the stored row and stops.
Only STOP/START/HELP keywords are acted on; every other text is payload.
Callers: the webhook views, after lucia_site.webhooks.pipeline verified the
request, and the simulator's scheduler (same doors, no provider network).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

from agents.models import Organization
from connectors import delivery, inbound, suppressions
from connectors.base import ParsedInbound
from connectors.models import Channel, InboundMessage, SuppressionReason
from runs import inbound_routing
from runs.models import Episode

log = logging.getLogger(__name__)

KEYWORD_KINDS = ("stop", "start", "help")
HELP_TEXT = "{name}: automated messages about your account. Reply STOP to opt out, START to opt back in."


def receive(items: Iterable[ParsedInbound], *, channel: str, organization: Organization | None) -> list[str]:
    """Handle the items of one request; returns replies owed to the sender (HELP texts)."""
    replies: list[str] = []
    for item in items:
        if item.kind == "status":
            receive_status(item, channel=channel, organization=organization)
        elif item.kind in KEYWORD_KINDS:
            reply = receive_keyword(item, channel=channel, organization=organization)
            replies += [reply] if reply else []
        else:
            receive_message(item, channel=channel, organization=organization)
    return replies


def receive_message(item: ParsedInbound, *, channel: str, organization: Organization | None) -> InboundMessage:
    return route_message(item, channel=channel, organization=organization)[0]


def route_message(item: ParsedInbound, *, channel: str,
                  organization: Organization | None) -> tuple[InboundMessage, Episode | None]:
    """`receive_message`, with the episode routing made of it (None: a repeated delivery, or triage)."""
    episode = None
    with transaction.atomic():
        message, created = inbound.store(item, channel=channel, organization=organization)
        if created:
            episode = inbound_routing.deliver(message, organization=organization)
    return message, episode


def receive_keyword(item: ParsedInbound, *, channel: str, organization: Organization | None) -> str:
    """STOP suppresses the number for the whole organization (and reaches the run), START lifts it;
    HELP gets the help text."""
    with transaction.atomic():
        message, created = inbound.store(item, channel=channel, organization=organization)
        if created:
            _act_on_keyword(message, item, organization=organization,
                            keyword_channel=_contact_channel(item, channel=channel))
    if item.kind == "help":
        return HELP_TEXT.format(name=organization.name if organization else "Lucia")
    return ""


def _act_on_keyword(
    message: InboundMessage, item: ParsedInbound, *, organization: Organization | None, keyword_channel: str
) -> None:
    if organization is None:
        log.warning("%s keyword from %s for no organization", item.kind, item.from_address)
    elif item.kind == "stop":
        suppressions.suppress(organization, channel=keyword_channel, address=item.from_address,
                              reason=SuppressionReason.STOP)
        # The run hears it too: an opt-out goes to a human at once instead of waiting out the ladder.
        inbound_routing.deliver(message, organization=organization)
        return
    elif item.kind == "start" and not suppressions.unsuppress(
            organization, channel=keyword_channel, address=item.from_address):
        # "Yes" is one of Twilio's opt-in words; from a number that never opted out it is an answer.
        inbound_routing.deliver(message, organization=organization)
        return
    inbound.mark_ignored(message)


def receive_status(item: ParsedInbound, *, channel: str, organization: Organization | None) -> None:
    """A tracking event: stored once; opted-out, invalid, bounced or complained addresses are suppressed.

    The event belongs to the organization of the send its key names (when the key is unknown, to
    `organization`, whose credentials signed it; None when the site's own key did). A signer never acts on another
    organization's send: such an event is dropped, since a stored one would prove that send accepted.
    """
    owner = (inbound_routing.organization_of_send(item.idem_key) if item.idem_key else None) or organization
    if organization is not None and owner is not None and owner.pk != organization.pk:
        log.warning("%s status for a send of organization %s signed by organization %s: dropped",
                    channel, owner.pk, organization.pk)
        return
    with transaction.atomic():
        if delivery.record(item, channel=channel) is None:
            return
        if owner is not None:
            delivery.suppress_if_lost(item, channel=channel, organization=owner)
        if delivery.is_failure(item) and item.idem_key and owner is not None:
            inbound_routing.note_failed_delivery(item.idem_key, status=item.status or "",
                                                 detail=str(item.headers.get("error_code") or ""))


def _contact_channel(item: ParsedInbound, *, channel: str) -> str:
    """The channel a keyword suppresses: the webhook's own, or for the sandbox what the item says or its
    sender looks like."""
    if channel != Channel.SANDBOX:
        return channel
    named = item.raw.get("channel")
    if named in Channel.values and named != Channel.SANDBOX:
        return named
    return Channel.EMAIL if "@" in item.from_address else Channel.SMS
