"""Which identities a webhook request may be signed by, read from its addressing fields before verification.

The addressing fields (Twilio's numbers, Slack's team id, the mailbox a mail
was delivered to) only pick whose secret to check with. Nothing else is read,
stored or acted on until a connector verifies. Matching is exact, on
normalized addresses: never by domain.
"""

from __future__ import annotations

from connectors import addresses, registry
from connectors.base import Connector
from connectors.models import Channel, Identity

MAILGUN_OWN_KEY = "webhook_signing_key"


def for_numbers(*numbers: str, channel: str) -> list[Identity]:
    """Live (non-sandbox) identities on `channel` owning one of the numbers (Twilio's To or From)."""
    wanted = {n.strip() for n in numbers if n} | {addresses.normalize_phone(n) for n in numbers if n}
    return list(_live(channel).filter(address__in=wanted - {""}))


def for_slack(payload: dict) -> list[Identity]:
    """Slack identities by team id (or app id). Slack's url_verification names no team: then every
    live Slack identity is a candidate, and the one whose signing secret verifies answers."""
    names = {payload.get("team_id"), payload.get("api_app_id")} - {None, ""}
    names = {name for name in names if isinstance(name, str)}
    if names:
        return list(_live(Channel.SLACK).filter(address__in=names))
    return list(_live(Channel.SLACK)) if payload.get("type") == "url_verification" else []


def for_email(address: str) -> Identity | None:
    """The live email identity of exactly this mailbox (never one on the same domain)."""
    normalized = addresses.normalize_email(address)
    return _live(Channel.EMAIL).filter(address=normalized).first() if normalized else None


def mailgun_signers(*mailboxes: str) -> list[tuple[Connector, Identity | None]]:
    """Connectors that may have signed a Mailgun post: the site's key (Lucia's own Mailgun account, no
    identity) first, then the identities of these exact mailboxes that hold their own signing key."""
    site = registry.connector_class(Channel.EMAIL)(Identity(channel=Channel.EMAIL), secrets={})
    found: list[tuple[Connector, Identity | None]] = [(site, None)]
    for mailbox in dict.fromkeys(filter(None, mailboxes)):
        identity = for_email(mailbox)
        if identity is not None and MAILGUN_OWN_KEY in (identity.secret_names or []):
            found.append((registry.connector_for(identity), identity))
    return found


def for_sandbox(address: str) -> Identity | None:
    if not address:
        return None
    return Identity.objects.filter(active=True, sandbox=True, address=address).select_related("organization").first()


def _live(channel: str):
    return Identity.objects.filter(active=True, sandbox=False, channel=channel).select_related("organization")
