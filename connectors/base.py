"""The connector contract: one class per channel, each doing only provider I/O.

Nothing here (or in any connector module) imports from `runs`: the runtime
builds an OutboundMessage from its own state and hands it down.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from connectors.errors import ConnectorError
from connectors.models import DeliveryEvent, Identity

__all__ = [
    "Connector", "ConnectorError", "LookupResult", "OutboundMessage", "ParsedInbound", "SendResult", "SignatureStamp",
    "INBOUND_KINDS", "body_hash", "callback_url", "claimed_by_other_keys", "public_url_of", "recorded_delivery",
]


INBOUND_KINDS = ("message", "status", "call_report", "stop", "start", "help")


@dataclass(frozen=True)
class OutboundMessage:
    idem_key: str
    channel: str
    # Normalized: lower-cased email, E.164 number, Slack user or channel id.
    to: str
    body: str
    subject: str | None = None
    # A full reply-to address; when None and run_token is set, email builds reply+<token>@domain.
    reply_to: str | None = None
    # Email: a Message-ID; Slack: "<channel>:<ts>" or a bare thread ts.
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    # message_ids.reply_token(run_id): lets a reply find its run.
    run_token: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Voice: what the call says; falls back to body.
    brief: str | None = None
    status_callback_url: str | None = None
    # The run's clock at send time (virtual in simulation); only the sandbox stores it.
    sent_at: datetime | None = None
    # Slack: Block Kit blocks shown instead of `body` (which stays the notification text), e.g. answer buttons.
    blocks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SendResult:
    provider_message_id: str
    accepted_at: datetime


@dataclass(frozen=True)
class LookupResult:
    """Was this idempotency key sent? found: True / False / None (the provider could not say).

    `transient`: with found None, the provider could not be asked now (unreachable, 5xx, 429, its records
    not settled yet): ask again later. Without it, None means nobody can tell, and a human decides.
    `candidates`: found on something other than our key (an SMS body hash, a call to the recipient in the
    window): every provider id that matched and no other key of ours claims, so the runtime can rule out
    the ones another send of its own owns. Empty when the match is on our key or our metadata.
    """

    found: bool | None
    provider_message_id: str | None = None
    transient: bool = False
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParsedInbound:
    """One provider webhook item, normalized. `kind` is message|status|call_report|stop|start|help."""

    provider_id: str
    kind: str = "message"
    from_address: str = ""
    to_address: str = ""
    subject: str = ""
    text: str = ""
    # [{filename, content_type, size, sha256, content_b64?, url?}]
    attachments: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, Any] = field(default_factory=dict)
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    # Slack: "<channel>:<thread_ts>", matching the provider_message_id of the message it answers.
    thread_ref: str | None = None
    # Status events: the provider's normalized state (delivered, failed, bounced, complained...).
    status: str | None = None
    # The idempotency key a status event or call report belongs to, when the provider echoes it.
    idem_key: str | None = None
    # The provider's id of the message a status event is about.
    provider_message_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SignatureStamp:
    """What a verified request's signature covers besides the body, for the freshness and replay checks.

    `signed_at`: the provider's signing time (Unix seconds), None when it signs no time (Twilio).
    `nonce`: a value the provider never signs twice (Mailgun's token, a signature over a timestamp);
    None when the request carries none.
    """

    signed_at: float | None = None
    nonce: str | None = None


class Connector(ABC):
    """Base class. Subclasses set `channel` and implement the four methods."""

    channel: str = ""
    # Seconds after an attempt whose outcome is unknown before a lookup may be trusted: the provider's
    # records (and a slow acceptance) catch up. None: LUCIA_SEND_SETTLE_SECONDS.
    settle_seconds: float | None = None
    # Whether a send is a row of Lucia's own database rather than a request to a provider outside it (the sandbox):
    # nothing leaves, and the row commits after everything written before the send, so the commit that precedes
    # the send need not wait for the disk (runs.outbox.open_row, `unflushed`).
    records_in_database: bool = False

    def __init__(self, identity: Identity, *, secrets: dict[str, str]) -> None:
        self.identity = identity
        self.secrets = secrets

    @abstractmethod
    def send(self, message: OutboundMessage) -> SendResult:
        """Hand the message to the provider once; raises ConnectorError."""

    @abstractmethod
    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        """Ask whether `message.idem_key` was accepted by the provider at or after `sent_after`."""

    @abstractmethod
    def verify_request(self, request: HttpRequest) -> bool:
        """True when the webhook request is signed by the provider (checked on the raw body)."""

    @abstractmethod
    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        """The items of a verified webhook request; [] when there is nothing for Lucia in it."""

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        """The signing time and one-time value of a request verify_request accepted."""
        return SignatureStamp()

    def require_secret(self, name: str) -> str:
        value = self.secrets.get(name)
        if not value:
            raise ConnectorError(
                f"{self.identity} has no secret {name!r}", permanent=True, code="missing_secret"
            )
        return value


def body_hash(text: str) -> str:
    """Hash of a message body, whitespace-trimmed: SMS lookup matches sends by it."""
    return hashlib.sha256(text.strip().encode()).hexdigest()


def callback_url(path: str, *, idem_key: str | None = None) -> str:
    """An absolute URL under LUCIA_PUBLIC_URL (the URL providers sign), carrying the key when given."""
    url = settings.LUCIA_PUBLIC_URL.rstrip("/") + path
    return f"{url}?k={idem_key}" if idem_key else url


def recorded_delivery(channel: str, idem_key: str) -> DeliveryEvent | None:
    """A tracking event already received for this key: proof the provider accepted the send."""
    return DeliveryEvent.objects.filter(channel=channel, idem_key=idem_key).exclude(provider_message_id="").first()


def claimed_by_other_keys(channel: str, provider_ids: list[str], *, idem_key: str) -> set[str]:
    """Of `provider_ids`, those a status callback already tied to another of our keys: not this send."""
    if not provider_ids:
        return set()
    events = DeliveryEvent.objects.filter(channel=channel, provider_message_id__in=provider_ids)
    return set(events.exclude(idem_key="").exclude(idem_key=idem_key).values_list("provider_message_id", flat=True))


def public_url_of(request: HttpRequest) -> str:
    """The URL the provider called, as it signed it: LUCIA_PUBLIC_URL + path + query (proxies change host)."""
    return settings.LUCIA_PUBLIC_URL.rstrip("/") + request.get_full_path()
