"""SMS through Twilio Programmable Messaging.

The idempotency key rides in the status-callback URL (`?k=`); Twilio's message
resource does not echo that URL back. Lookup first reads the status callbacks
received for the key (a match on our key); failing that it lists messages from
our number to the recipient since the attempt and keeps those whose body hash
matches and whose status callback did not name another of our keys. Those are
only candidates: the runtime rules out ids another send of its own owns before
adopting one (runs.tool_executor), so another run's identical text to the same
person is never taken for this one.
"""

from __future__ import annotations

import posixpath
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from django.http import HttpRequest
from django.utils import timezone

from connectors import twilio_client
from connectors.base import (
    Connector,
    LookupResult,
    OutboundMessage,
    ParsedInbound,
    SendResult,
    SignatureStamp,
    body_hash,
    callback_url,
    claimed_by_other_keys,
    recorded_delivery,
)
from connectors.models import Channel

STATUS_PATH = "/hooks/twilio/status/"
# Provider clocks and ours differ; a send that began at T may be stamped slightly earlier.
CLOCK_SLACK = timedelta(minutes=1)
# Twilio's default opt-out handling answers these keywords; Lucia must honour them too.
STOP_WORDS = {"STOP", "STOPALL", "STOP ALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT", "REVOKE"}
START_WORDS = {"START", "YES", "UNSTOP"}
HELP_WORDS = {"HELP", "INFO"}
# Twilio trial accounts prefix outbound bodies; the stored body then differs from what was sent.
TRIAL_PREFIX = "Sent from your Twilio trial account - "


class SmsConnector(Connector):
    channel = Channel.SMS

    def send(self, message: OutboundMessage) -> SendResult:
        client = twilio_client.make_client(self._credentials())
        status_callback = message.status_callback_url or callback_url(STATUS_PATH, idem_key=message.idem_key)
        try:
            sent = client.messages.create(
                to=message.to, from_=self.identity.address, body=message.body, status_callback=status_callback
            )
        except twilio_client.PROVIDER_ERRORS as exc:
            raise twilio_client.connector_error(exc) from exc
        return SendResult(provider_message_id=sent.sid, accepted_at=sent.date_created or timezone.now())

    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        event = recorded_delivery(self.channel, message.idem_key)
        if event:
            return LookupResult(found=True, provider_message_id=event.provider_message_id)
        wanted = body_hash(message.body)
        try:
            client = twilio_client.make_client(self._credentials())
            records = client.messages.stream(
                to=message.to, from_=self.identity.address, limit=twilio_client.LOOKUP_LIMIT
            )
            candidates = twilio_client.recent(records, since=sent_after - CLOCK_SLACK)
        except twilio_client.PROVIDER_ERRORS as exc:
            return twilio_client.lookup_failure(exc)
        matching = [record.sid for record in candidates
                    if body_hash(_without_trial_prefix(record.body or "")) == wanted]
        others = claimed_by_other_keys(self.channel, matching, idem_key=message.idem_key)
        matching = [sid for sid in matching if sid not in others]
        if not matching:
            return LookupResult(found=False)
        return LookupResult(found=True, provider_message_id=matching[0], candidates=tuple(matching))

    def verify_request(self, request: HttpRequest) -> bool:
        return twilio_client.verify(request, auth_token=self.secrets.get("auth_token", ""))

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        return SignatureStamp(nonce=twilio_client.signature_of(request))

    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        params = twilio_client.form_params(request)
        if "Body" not in params and params.get("MessageStatus"):
            return [_status(params, idem_key=request.GET.get("k"))]
        if "MessageSid" not in params:
            return []
        return [_incoming(params)]

    def _credentials(self) -> dict[str, str]:
        self.require_secret("account_sid")
        self.require_secret("auth_token")
        return self.secrets


def keyword_kind(body: str, *, opt_out_type: str = "") -> str:
    """stop/start/help for Twilio's keywords (or its OptOutType field), else message."""
    if opt_out_type.upper() in ("STOP", "START", "HELP"):
        return opt_out_type.lower()
    word = " ".join(body.strip().strip(".!").upper().split())
    if word in STOP_WORDS:
        return "stop"
    if word in START_WORDS:
        return "start"
    if word in HELP_WORDS:
        return "help"
    return "message"


def _incoming(params: dict[str, str]) -> ParsedInbound:
    body = params.get("Body", "")
    return ParsedInbound(
        provider_id=params["MessageSid"],
        kind=keyword_kind(body, opt_out_type=params.get("OptOutType", "")),
        from_address=params.get("From", ""),
        to_address=params.get("To", ""),
        text=body,
        attachments=_media(params),
        headers={name: params[name] for name in ("AccountSid", "NumSegments", "NumMedia") if name in params},
        raw=params,
    )


def _status(params: dict[str, str], *, idem_key: str | None) -> ParsedInbound:
    sid = params.get("MessageSid") or params.get("SmsSid", "")
    status = params["MessageStatus"]
    return ParsedInbound(
        # One row per state change: Twilio posts sent, then delivered, for the same sid.
        provider_id=f"{sid}:{status}",
        kind="status",
        from_address=params.get("From", ""),
        to_address=params.get("To", ""),
        status=status,
        idem_key=idem_key,
        provider_message_id=sid,
        headers={"error_code": params["ErrorCode"]} if params.get("ErrorCode") else {},
        raw=params,
    )


def _media(params: dict[str, str]) -> list[dict[str, Any]]:
    # MMS media stay at Twilio (fetching needs the account's credentials): metadata and URL only.
    count = int(params.get("NumMedia") or 0)
    media = []
    for index in range(count):
        url = params.get(f"MediaUrl{index}", "")
        media.append({
            "filename": posixpath.basename(urlparse(url).path) or f"media{index}",
            "content_type": params.get(f"MediaContentType{index}", "application/octet-stream"),
            "size": None,
            "sha256": None,
            "url": url,
        })
    return media


def _without_trial_prefix(body: str) -> str:
    return body[len(TRIAL_PREFIX):] if body.startswith(TRIAL_PREFIX) else body
