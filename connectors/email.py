"""Email through Mailgun via django-anymail, the only module importing anymail.

A send carries its key three ways: a deterministic Message-ID, the
X-Lucia-Idempotency-Key header and anymail metadata (Mailgun user-variables,
echoed in every tracking event and in the Events API). Lookup first reads
recorded tracking events, then asks the Events API. Secrets: `api_key`,
optional `sender_domain` (default: the identity's domain), `api_url`,
`webhook_signing_key` (default: ANYMAIL MAILGUN_WEBHOOK_SIGNING_KEY).

Mailgun signs only timestamp + token, not the body: verify_request checks
that HMAC (and anymail's basic auth when configured); the webhook pipeline
refuses stale timestamps and reused tokens, which is what binds a body to
one signature.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import formataddr
from typing import Any

import requests
from anymail.exceptions import AnymailError, AnymailRecipientsRefused, AnymailWebhookValidationFailure
from anymail.message import AnymailMessage
from anymail.webhooks.mailgun import MailgunInboundWebhookView, MailgunTrackingWebhookView
from django.conf import settings
from django.core.mail import get_connection
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError
from django.utils import timezone

from connectors import message_ids
from connectors.base import (
    Connector,
    LookupResult,
    OutboundMessage,
    ParsedInbound,
    SendResult,
    SignatureStamp,
    recorded_delivery,
)
from connectors.errors import ConnectorError, transport_error
from connectors.models import Channel

BACKEND = "anymail.backends.mailgun.EmailBackend"
DEFAULT_API_URL = "https://api.mailgun.net/v3/"
KEY_HEADER = "X-Lucia-Idempotency-Key"
CLOCK_SLACK = timedelta(minutes=1)
# Mailgun's Events API lags acceptance by seconds; before this age an empty answer proves nothing.
EVENTS_SETTLE_S = 120
# What a garbled signature block or body raises inside anymail's validators and parsers.
MALFORMED = (AnymailWebhookValidationFailure, AnymailError, MultiPartParserError, KeyError, ValueError, TypeError,
             AttributeError, UnicodeError)
KEPT_HEADERS = (
    "Message-ID", "In-Reply-To", "References", "Date", "Reply-To", "Auto-Submitted", "Precedence",
    "X-Autoreply", "X-Autorespond", "List-Id", "X-Mailgun-Sflag",
)


class EmailConnector(Connector):
    channel = Channel.EMAIL

    def send(self, message: OutboundMessage) -> SendResult:
        email = AnymailMessage(
            subject=message.subject or "",
            body=message.body,
            from_email=formataddr((self.identity.display_name, self.identity.address)),
            to=[message.to],
            reply_to=[reply] if (reply := self._reply_to(message)) else None,
            headers=_headers(message),
            connection=get_connection(BACKEND, **self._backend_options()),
        )
        email.metadata = {"idem_key": message.idem_key, "run_token": message.run_token or ""}
        # The recipient is a person, not a campaign: no tracking pixels or rewritten links.
        email.track_opens = False
        email.track_clicks = False
        try:
            email.send()
        except AnymailRecipientsRefused as exc:
            raise ConnectorError(str(exc), permanent=True, code="recipients_refused") from exc
        except AnymailError as exc:
            raise _connector_error(exc) from exc
        status = email.anymail_status
        return SendResult(provider_message_id=status.message_id or message_ids.message_id_for(message.idem_key),
                          accepted_at=timezone.now())

    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        event = recorded_delivery(self.channel, message.idem_key)
        if event:
            return LookupResult(found=True, provider_message_id=event.provider_message_id)
        try:
            items = self._accepted_events(to=message.to, begin=sent_after - CLOCK_SLACK)
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 500
            return LookupResult(found=None, transient=status == 429 or status >= 500)
        except requests.RequestException:
            return LookupResult(found=None, transient=True)
        except (ValueError, KeyError, ConnectorError):
            return LookupResult(found=None)
        for item in items:
            if (item.get("user-variables") or {}).get("idem_key") == message.idem_key:
                headers = (item.get("message") or {}).get("headers") or {}
                return LookupResult(found=True, provider_message_id=headers.get("message-id"))
        # Provider time is wall time, never a run's virtual clock. Too early to trust an empty answer: ask again.
        if time.time() - sent_after.timestamp() < EVENTS_SETTLE_S:
            return LookupResult(found=None, transient=True)
        return LookupResult(found=False)

    def verify_request(self, request: HttpRequest) -> bool:
        """Mailgun's HMAC of timestamp + token under this identity's (or the site's) signing key."""
        if not self.signing_key():
            return False
        # Cache the raw body before anymail reads request.POST (a parsed multipart stream cannot be re-read).
        _ = request.body
        try:
            self._view(MailgunInboundWebhookView).run_validators(request)
        except MALFORMED:
            return False
        return True

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        fields = signature_fields(request)
        if fields is None:
            return SignatureStamp()
        try:
            signed_at = float(fields.timestamp)
        except ValueError:
            signed_at = None
        # "nan" and "inf" parse as floats but are no time at all.
        if signed_at is not None and not math.isfinite(signed_at):
            signed_at = None
        return SignatureStamp(signed_at=signed_at, nonce=fields.token or None)

    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        """The items of a verified post; raises ValueError when the body is not a Mailgun event."""
        _ = request.body  # cache the raw body before request.POST consumes the stream
        try:
            if request.content_type == "application/json":
                view = self._view(MailgunTrackingWebhookView)
                return [_tracking(event) for event in view.parse_events(request)]
            view = self._view(MailgunInboundWebhookView)
            return [_inbound(event, request) for event in view.parse_events(request)]
        except MALFORMED as exc:
            raise ValueError(f"not a Mailgun event: {exc}") from exc

    def signing_key(self) -> str:
        """The identity's own webhook signing key, else the site's (ANYMAIL MAILGUN_WEBHOOK_SIGNING_KEY)."""
        return self.secrets.get("webhook_signing_key") or site_signing_key()

    def _reply_to(self, message: OutboundMessage) -> str | None:
        if message.reply_to:
            return message.reply_to
        return message_ids.address_for_token(message.run_token) if message.run_token else None

    def _backend_options(self) -> dict[str, Any]:
        return {
            "api_key": self.require_secret("api_key"),
            "sender_domain": self._sender_domain(),
            "api_url": self.secrets.get("api_url") or DEFAULT_API_URL,
        }

    def _sender_domain(self) -> str:
        return self.secrets.get("sender_domain") or self.identity.address.rpartition("@")[2]

    def _view(self, view_class: type) -> Any:
        # Parsing needs no key, but anymail's views refuse to exist without one.
        return view_class(webhook_signing_key=self.signing_key() or "unset")

    def _accepted_events(self, *, to: str, begin: datetime) -> list[dict[str, Any]]:
        """Mailgun "accepted" events for the recipient since `begin` (oldest first, one page)."""
        api_url = (self.secrets.get("api_url") or DEFAULT_API_URL).rstrip("/")
        response = requests.get(
            f"{api_url}/{self._sender_domain()}/events",
            auth=("api", self.require_secret("api_key")),
            params={"event": "accepted", "recipient": to, "begin": f"{begin.timestamp():.0f}", "ascending": "yes",
                    "limit": 300},
            timeout=15,
        )
        response.raise_for_status()
        return response.json()["items"]


def _headers(message: OutboundMessage) -> dict[str, str]:
    headers = {"Message-ID": message_ids.message_id_for(message.idem_key), KEY_HEADER: message.idem_key}
    if message.in_reply_to:
        headers["In-Reply-To"] = message.in_reply_to
    references = list(message.references) or ([message.in_reply_to] if message.in_reply_to else [])
    if references:
        headers["References"] = " ".join(references)
    return headers


def _connector_error(exc: AnymailError) -> ConnectorError:
    response = getattr(exc, "response", None)
    status = response.status_code if response is not None else None
    if status is None:
        if not isinstance(exc, requests.RequestException):
            return ConnectorError(f"Mailgun: {exc}", permanent=True)
        # No HTTP answer: anymail re-raises the requests error as its cause; it tells whether anything left.
        return transport_error(exc.__cause__ or exc, provider="Mailgun")
    if 200 <= status < 300:
        # Accepted, but the answer could not be read: it may well have been queued.
        return ConnectorError(f"Mailgun: unreadable answer ({exc})", outcome_unknown=True)
    if 400 <= status < 500 and status != 429:
        return ConnectorError(f"Mailgun refused the message ({status})", permanent=True, code=str(status))
    return ConnectorError(f"Mailgun error {status}", code=str(status), outcome_unknown=status >= 500)


def site_signing_key() -> str:
    return str((getattr(settings, "ANYMAIL", None) or {}).get("MAILGUN_WEBHOOK_SIGNING_KEY") or "")


@dataclass(frozen=True)
class SignatureFields:
    timestamp: str
    token: str
    signature: str


def signature_fields(request: HttpRequest) -> SignatureFields | None:
    """Mailgun's signature block: in the JSON body (tracking) or the form fields (inbound); None when absent
    or not strings."""
    try:
        if request.content_type == "application/json":
            block = json.loads(request.body)["signature"]
            values = (block["timestamp"], block["token"], block["signature"])
        else:
            values = (request.POST["timestamp"], request.POST["token"], request.POST["signature"])
    except (MultiPartParserError, KeyError, ValueError, TypeError, UnicodeError):
        return None
    if not all(isinstance(value, str | int) and not isinstance(value, bool) for value in values):
        return None
    return SignatureFields(*(str(value) for value in values))


def _tracking(event: Any) -> ParsedInbound:
    metadata = event.metadata or {}
    return ParsedInbound(
        provider_id=event.event_id or f"{event.message_id}:{event.event_type}",
        kind="status",
        from_address=event.recipient or "",
        status=event.event_type,
        idem_key=metadata.get("idem_key") or None,
        provider_message_id=event.message_id,
        headers={"reject_reason": event.reject_reason, "description": event.description,
                 "mta_response": event.mta_response, "run_token": metadata.get("run_token", "")},
        raw=event.esp_event if isinstance(event.esp_event, dict) else {},
    )


def _inbound(event: Any, request: HttpRequest) -> ParsedInbound:
    message = event.message
    headers = {name: message[name] for name in KEPT_HEADERS if message[name] is not None}
    headers["stripped_text"] = message.stripped_text or ""
    headers["token"] = event.event_id or ""
    message_id = (message["Message-ID"] or "").strip()
    return ParsedInbound(
        # Message-ID survives Mailgun's retries (each gets a new token); the token is the fallback.
        provider_id=message_id or f"mailgun:{event.event_id}",
        from_address=message.from_email.addr_spec if message.from_email else "",
        to_address=message.envelope_recipient or (message.to[0].addr_spec if message.to else ""),
        subject=message.get("Subject", "") or "",
        text=message.text or "",
        attachments=[_attachment(part) for part in message.attachments],
        headers=headers,
        in_reply_to=(message["In-Reply-To"] or "").strip() or None,
        references=message_ids.split_references(message["References"]),
        raw={key: request.POST.get(key) for key in request.POST if not key.startswith("attachment-")},
    )


def _attachment(part: Any) -> dict[str, Any]:
    content = part.get_content_bytes() or b""
    item = {
        "filename": part.get_filename() or "",
        "content_type": part.get_content_type(),
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    # Up to the storage cap the bytes travel on (connectors.attachments keeps them); larger: metadata only.
    if len(content) <= settings.LUCIA_ATTACHMENT_MAX_BYTES:
        item["content_b64"] = base64.b64encode(content).decode()
    return item


def parse_anymail_event(event: Any) -> ParsedInbound:
    """The ParsedInbound for an event anymail's own Mailgun views signalled (inbound or tracking).

    Those views verified the signature already; their inbound events carry the request as esp_event.
    """
    return _inbound(event, event.esp_event) if hasattr(event, "message") else _tracking(event)
