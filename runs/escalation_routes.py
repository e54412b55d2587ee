"""Writes EscalationRoute: where an organization's escalations are announced (runs.notifications).

The Studio and the API both call set_route, so both give the same answers:
the identities must be the organization's own, live, and of the right channel
(a notice is sent from its mailbox, posted by its Slack bot); the timezone an
IANA name; quiet hours both set or both empty.
"""

from __future__ import annotations

import re
from datetime import time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from agents.models import Organization
from connectors.models import Channel, Identity
from runs.models import EscalationRoute

# Slack conversation ids: public/private channels (C…, G…); a DM id (D…) would reach one person only,
# which is allowed too.
SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,30}")
FIELDS = ("email_identity", "email_to", "slack_identity", "slack_channel", "timezone", "quiet_start", "quiet_end")


class RouteRefused(ValueError):
    """A route that cannot be stored; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def route_of(organization: Organization) -> EscalationRoute | None:
    return EscalationRoute.objects.filter(organization=organization).first()


def check_route(
    organization: Organization, *, email_identity: Identity | None, email_to: str, slack_identity: Identity | None,
    slack_channel: str, timezone: str, quiet_start: time | None, quiet_end: time | None,
) -> dict:
    """The route's fields, normalized, when they may be stored; raises RouteRefused otherwise."""
    email_to, slack_channel = email_to.strip().lower(), slack_channel.strip()
    _check_identity(organization, email_identity, channel=Channel.EMAIL, field="email_identity")
    _check_identity(organization, slack_identity, channel=Channel.SLACK, field="slack_identity")
    if bool(email_identity) != bool(email_to):
        raise RouteRefused("email_to", "An email route needs both the sending identity and the address to notify.")
    if email_to:
        try:
            validate_email(email_to)
        except ValidationError:
            raise RouteRefused("email_to", f"{email_to!r} is not an email address.") from None
    if bool(slack_identity) != bool(slack_channel):
        raise RouteRefused("slack_channel", "A Slack route needs both the Slack identity and the channel id.")
    if slack_channel and not SLACK_CHANNEL.fullmatch(slack_channel):
        raise RouteRefused("slack_channel", f"{slack_channel!r} is not a Slack channel id (e.g. C0123ABCD).")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise RouteRefused("timezone", f"{timezone!r} is not an IANA timezone (e.g. Europe/Paris).") from None
    if (quiet_start is None) != (quiet_end is None):
        raise RouteRefused("quiet_end", "Quiet hours need both a start and an end.")
    return {"email_identity": email_identity, "email_to": email_to, "slack_identity": slack_identity,
            "slack_channel": slack_channel, "timezone": timezone, "quiet_start": quiet_start, "quiet_end": quiet_end}


def set_route(organization: Organization, **fields) -> EscalationRoute:
    """Create or replace the organization's route (every field of FIELDS given); raises RouteRefused."""
    values = check_route(organization, **fields)
    route, _ = EscalationRoute.objects.update_or_create(organization=organization, defaults=values)
    return route


def _check_identity(organization: Organization, identity: Identity | None, *, channel: str, field: str) -> None:
    if identity is None:
        return
    # One answer for another organization's identity and a missing one: it reveals nothing.
    if identity.organization_id != organization.pk or identity.channel != channel or not identity.active:
        raise RouteRefused(field, f"Choose one of your organization's active {channel} identities.")
