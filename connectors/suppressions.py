"""Addresses an organization must not contact on a channel: SMS STOP, email bounces and complaints.

A suppression belongs to the organization, not to a run, so one STOP stops
every run of the organization (the ToolExecutor checks before each send).
Addresses are normalized by connectors.addresses, as the runtime's
recipients are, so both sides compare equal.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agents.models import Organization
from connectors.addresses import normalize as normalize_address
from connectors.models import Suppression, SuppressionLift

START_NOTE = "The contact opted back in (START)."


class LiftRefused(ValueError):
    """The suppression cannot be lifted as asked; the message says what to do."""


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
    """Lift a suppression because the contact texted START; True when one was lifted."""
    normalized = normalize_address(channel, address)
    row = Suppression.objects.filter(organization=organization, channel=channel, address=normalized).first()
    return row is not None and _lift(row, by_user=None, note=START_NOTE) is not None


def lift(suppression: Suppression, *, by_user, note: str) -> SuppressionLift:
    """A person lifts the suppression: the address may be contacted again. Returns the audit row.

    Raises LiftRefused without a reason, or when the suppression was already lifted.
    """
    note = (note or "").strip()
    if not note:
        raise LiftRefused("Say why the suppression is lifted (e.g. the contact asked by phone to hear from us "
                          "again): the reason is kept with who lifted it and when.")
    lifted = _lift(suppression, by_user=by_user, note=note)
    if lifted is None:
        raise LiftRefused(f"{suppression.channel} {suppression.address} is no longer suppressed: someone lifted it "
                          "already.")
    return lifted


def _lift(suppression: Suppression, *, by_user, note: str) -> SuppressionLift | None:
    """Delete the row and record the lift in one transaction; None when the row is already gone."""
    with transaction.atomic():
        row = Suppression.objects.select_for_update().filter(pk=suppression.pk).first()
        if row is None:
            return None
        row.delete()
        return SuppressionLift.objects.create(
            organization_id=row.organization_id, channel=row.channel, address=row.address, reason=row.reason,
            suppressed_at=row.created_at, lifted_by=by_user, lifted_at=timezone.now(), note=note,
        )


def is_suppressed(organization: Organization | int, *, channel: str, address: str) -> bool:
    organization_id = organization if isinstance(organization, int) else organization.pk
    normalized = normalize_address(channel, address)
    return Suppression.objects.filter(organization_id=organization_id, channel=channel, address=normalized).exists()
