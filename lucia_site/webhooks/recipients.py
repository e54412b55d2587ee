"""Which identity a webhook request is addressed to, and the connector that proves it signed.

The addressing fields (Twilio's numbers, Slack's team id) are read from the
body before its signature is checked: they only pick whose secret to check
with. Nothing else is read, stored or acted on until a connector verifies.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest

from connectors import registry, suppressions
from connectors.base import Connector
from connectors.models import Channel, Identity


def verified_connector(request: HttpRequest, identities: Iterable[Identity]) -> Connector | None:
    """The connector of the first identity whose secrets verify the request's signature, else None."""
    for identity in identities:
        connector = registry.connector_for(identity)
        if connector.verify_request(request):
            return connector
    return None


def for_numbers(*numbers: str, channel: str) -> list[Identity]:
    """Live (non-sandbox) identities on `channel` owning one of the numbers (Twilio's To or From)."""
    wanted = {n for n in numbers if n} | {suppressions.normalize_address(channel, n) for n in numbers if n}
    return list(_live(channel).filter(address__in=wanted - {""}))


def for_slack(payload: dict) -> list[Identity]:
    """Slack identities by team id (or app id). Slack's url_verification names no team: then every
    live Slack identity is a candidate, and the one whose signing secret verifies answers."""
    names = {payload.get("team_id"), payload.get("api_app_id")} - {None, ""}
    if names:
        return list(_live(Channel.SLACK).filter(address__in=names))
    return list(_live(Channel.SLACK)) if payload.get("type") == "url_verification" else []


def for_email(*addresses: str) -> Identity | None:
    """The email identity for a mailbox address, else one on the same domain."""
    for address in filter(None, addresses):
        address = address.strip().lower()
        identity = _live(Channel.EMAIL).filter(address__iexact=address).first()
        if identity is None and "@" in address:
            identity = _live(Channel.EMAIL).filter(address__iendswith="@" + address.rpartition("@")[2]).first()
        if identity is not None:
            return identity
    return None


def for_sandbox(address: str) -> Identity | None:
    if not address:
        return None
    return Identity.objects.filter(active=True, sandbox=True, address=address).select_related("organization").first()


def _live(channel: str):
    return Identity.objects.filter(active=True, sandbox=False, channel=channel).select_related("organization")
