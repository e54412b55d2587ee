"""Addresses an organization must not contact on a channel: SMS STOP, email bounces and complaints.

A suppression belongs to the organization, not to a run, so one STOP stops
every run of the organization (the ToolExecutor checks before each send).
Addresses are normalized by connectors.addresses, as the runtime's
recipients are, so both sides compare equal.
"""

from __future__ import annotations

from agents.models import Organization
from connectors.addresses import normalize as normalize_address
from connectors.models import Suppression


def suppress(organization: Organization, *, channel: str, address: str, reason: str) -> Suppression | None:
    """Suppress the address; returns the row (the existing one when already suppressed), None for no address.

    The first reason is kept: a later bounce does not overwrite a STOP.
    """
    normalized = normalize_address(channel, address)
    if not normalized:
        return None
    row, _ = Suppression.objects.get_or_create(
        organization=organization, channel=channel, address=normalized, defaults={"reason": reason}
    )
    return row


def unsuppress(organization: Organization, *, channel: str, address: str) -> bool:
    """Lift a suppression (the contact texted START); True when one was lifted."""
    normalized = normalize_address(channel, address)
    deleted, _ = Suppression.objects.filter(organization=organization, channel=channel, address=normalized).delete()
    return deleted > 0


def is_suppressed(organization: Organization | int, *, channel: str, address: str) -> bool:
    organization_id = organization if isinstance(organization, int) else organization.pk
    normalized = normalize_address(channel, address)
    return Suppression.objects.filter(organization_id=organization_id, channel=channel, address=normalized).exists()
