"""Slack through the Web API (slack_sdk), the only module importing it.

The key rides in `chat.postMessage` metadata (event_type `lucia_send`), which
conversations.history/replies return with include_all_metadata, so lookup
can say for sure. Secrets: `bot_token`, `signing_secret`, optional `api_base_url`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.webhook import WebhookClient

from connectors.base import Connector, LookupResult, OutboundMessage, ParsedInbound, SendResult, SignatureStamp
from connectors.errors import ConnectorError, transport_error
from connectors.models import Channel

EVENT_TYPE = "lucia_send"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"
REQUEST_TIMEOUT_S = 15
CLOCK_SLACK = timedelta(minutes=1)
LOOKUP_PAGES = 5
# Interaction replies go only here: a response_url elsewhere would make Lucia post wherever a payload says.
RESPONSE_HOST = "hooks.slack.com"
# Slack error strings after which the same post can never succeed.
PERMANENT_ERRORS = {
    "channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "account_inactive", "token_revoked",
    "user_not_found", "msg_too_long", "no_text", "restricted_action", "cannot_dm_bot", "missing_scope",
}
# Message subtypes that are people writing; edits, joins and bot posts are not inbound.
HUMAN_SUBTYPES = {None, "file_share", "thread_broadcast"}
# slack_sdk raises transport failures (URLError, timeouts) unwrapped; they are OSErrors.
CLIENT_ERRORS = (SlackClientError, OSError)


class SlackConnector(Connector):
    channel = Channel.SLACK

    def send(self, message: OutboundMessage) -> SendResult:
        client = self._client()
        try:
            response = client.chat_postMessage(
                channel=message.to,
                text=message.body,
                thread_ts=thread_ts_of(message.in_reply_to),
                blocks=message.blocks or None,
                metadata={"event_type": EVENT_TYPE, "event_payload": {"idem_key": message.idem_key}},
            )
        except CLIENT_ERRORS as exc:
            raise _connector_error(exc) from exc
        # "<channel>:<ts>" is what a threaded reply's thread_ref will name.
        return SendResult(provider_message_id=f"{response['channel']}:{response['ts']}", accepted_at=timezone.now())

    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        client = self._client()
        oldest = f"{(sent_after - CLOCK_SLACK).timestamp():.6f}"
        thread_ts = thread_ts_of(message.in_reply_to)
        try:
            channel = _conversation_id(client, message.to)
            cursor = None
            for _ in range(LOOKUP_PAGES):
                if thread_ts:
                    # Thread replies are not in conversations.history.
                    response = client.conversations_replies(
                        channel=channel, ts=thread_ts, oldest=oldest, include_all_metadata=True, limit=200,
                        cursor=cursor,
                    )
                else:
                    response = client.conversations_history(
                        channel=channel, oldest=oldest, include_all_metadata=True, limit=200, cursor=cursor
                    )
                for item in response.get("messages", []):
                    if _carries_key(item, message.idem_key):
                        return LookupResult(found=True, provider_message_id=f"{channel}:{item['ts']}")
                cursor = (response.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    return LookupResult(found=False)
        except CLIENT_ERRORS as exc:
            return _lookup_failure(exc)
        # More pages than looked at: cannot say it is absent.
        return LookupResult(found=None)

    def verify_request(self, request: HttpRequest) -> bool:
        """The v0 HMAC of timestamp + body under this identity's signing secret. Freshness is the webhook
        pipeline's (its window is a setting; slack_sdk's is_valid would fix it at 5 minutes)."""
        secret = self.secrets.get("signing_secret", "")
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        signature = request.headers.get(SIGNATURE_HEADER, "")
        if not secret or not (timestamp.isascii() and timestamp.isdigit()) or not signature:
            return False
        # Over the raw bytes: slack_sdk's generate_signature decodes the body first and fails on bad UTF-8.
        digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + request.body, hashlib.sha256)
        return constant_time_compare(f"v0={digest.hexdigest()}", signature)

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        # Slack re-signs each retry with a new timestamp, so a repeated signature is a replay.
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        return SignatureStamp(signed_at=float(timestamp) if timestamp.isascii() and timestamp.isdigit() else None,
                              nonce=request.headers.get(SIGNATURE_HEADER) or None)

    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        payload = json.loads(request.body)
        if not isinstance(payload, dict) or not isinstance(payload.get("event") or {}, dict):
            raise ValueError("not a Slack event payload")
        # url_verification is answered by the view; only event callbacks carry messages.
        if payload.get("type") != "event_callback":
            return []
        event = payload.get("event") or {}
        if event.get("type") not in ("message", "app_mention"):
            return []
        if event.get("bot_id") or event.get("subtype") not in HUMAN_SUBTYPES:
            return []
        channel = event.get("channel", "")
        thread_ts = event.get("thread_ts")
        return [ParsedInbound(
            provider_id=payload.get("event_id") or f"{channel}:{event.get('ts')}",
            from_address=event.get("user", ""),
            to_address=channel,
            text=event.get("text", ""),
            attachments=[_file(item) for item in event.get("files", [])],
            headers={
                "team_id": payload.get("team_id", ""), "channel": channel, "ts": event.get("ts", ""),
                "channel_type": event.get("channel_type", ""), "event_type": event.get("type", ""),
            },
            thread_ref=f"{channel}:{thread_ts}" if thread_ts else None,
            raw=payload,
        )]

    def respond(self, response_url: str, *, text: str) -> bool:
        """Show `text` to the person who clicked, and only to them (an ephemeral reply on the interaction's
        response_url). False when the URL is not Slack's (or the fake API's, in tests) or Slack refused it."""
        if not _is_response_url(response_url, api_base_url=self.secrets.get("api_base_url") or ""):
            return False
        try:
            response = WebhookClient(response_url, timeout=REQUEST_TIMEOUT_S).send(
                text=text, response_type="ephemeral", replace_original=False)
        except CLIENT_ERRORS:
            return False
        return response.status_code == 200

    def _client(self) -> WebClient:
        token = self.require_secret("bot_token")
        # No retry handlers: a retried post after a dropped connection can post twice.
        return WebClient(
            token=token,
            base_url=self.secrets.get("api_base_url") or WebClient.BASE_URL,
            timeout=REQUEST_TIMEOUT_S,
            retry_handlers=[],
        )


def interaction_of(body: bytes) -> dict[str, Any]:
    """The JSON `payload` field of an interaction post (application/x-www-form-urlencoded, as Slack sends
    it); raises ValueError when the body is not one."""
    fields = parse_qs(body.decode("utf-8"), strict_parsing=False, max_num_fields=20)
    [raw] = fields.get("payload") or [""]
    payload = json.loads(raw)
    if not isinstance(payload, dict):
        raise ValueError("the interaction payload is not a JSON object")
    return payload


def _is_response_url(url: str, *, api_base_url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname == RESPONSE_HOST:
        return True
    base = urlsplit(api_base_url)
    return bool(api_base_url) and (parts.scheme, parts.netloc) == (base.scheme, base.netloc)


def thread_ts_of(reference: str | None) -> str | None:
    """The thread ts in "<channel>:<ts>" (our provider ids) or a bare ts."""
    if not reference:
        return None
    return reference.rpartition(":")[2] or None


def _conversation_id(client: WebClient, to: str) -> str:
    # A user id posts into the bot's DM with them; history needs that DM's channel id.
    if to[:1] in ("U", "W"):
        return client.conversations_open(users=to)["channel"]["id"]
    return to


def _carries_key(item: dict[str, Any], idem_key: str) -> bool:
    metadata = item.get("metadata") or {}
    payload = metadata.get("event_payload") or {}
    return metadata.get("event_type") == EVENT_TYPE and payload.get("idem_key") == idem_key


def _file(item: dict[str, Any]) -> dict[str, Any]:
    # Files stay in Slack (fetching needs the bot token): metadata and URL only.
    return {
        "filename": item.get("name", ""),
        "content_type": item.get("mimetype", "application/octet-stream"),
        "size": item.get("size"),
        "sha256": None,
        "url": item.get("url_private", ""),
    }


def _connector_error(exc: Exception) -> ConnectorError:
    if isinstance(exc, SlackApiError):
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
        status = exc.response.status_code
        if error in PERMANENT_ERRORS:
            return ConnectorError(f"Slack: {error}", permanent=True, code=error)
        # ratelimited (429) was refused; a 5xx may have posted before failing.
        return ConnectorError(f"Slack: {error or status}", code=error, outcome_unknown=status >= 500)
    return transport_error(exc, provider="Slack")


def _lookup_failure(exc: Exception) -> LookupResult:
    """Unreachable, rate-limited or a 5xx: ask again later. An API error that will not change cannot answer."""
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        return LookupResult(found=None, transient=status == 429 or status >= 500)
    return LookupResult(found=None, transient=True)
