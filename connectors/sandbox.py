"""Sandbox connector: stores what would have been sent, delivers nothing.

The simulator reads SandboxMessage rows and answers as personas through the
webhook intake (the same doors as providers, without their network). Tests
post inbound messages signed with `sign_body` to /hooks/sandbox/, which exists
only with DEBUG on or LUCIA_SANDBOX_WEBHOOK set.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db.backends.utils import CursorWrapper
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from connectors import commits, outages
from connectors.base import (
    INBOUND_KINDS,
    Connector,
    ConnectorError,
    LookupResult,
    OutboundMessage,
    ParsedInbound,
    SendResult,
    SignatureStamp,
)
from connectors.models import Channel, SandboxMessage
from connectors.prepared_cursors import PreparedDebugWrapper, PreparingCursor, connected

SIGNATURE_HEADER = "X-Lucia-Sandbox-Signature"
_SALT = "lucia.connectors.sandbox_inbound"


def sign_body(body: bytes) -> str:
    """The signature header value for a sandbox inbound body (HMAC keyed from SECRET_KEY)."""
    return salted_hmac(_SALT, body, algorithm="sha256").hexdigest()


def provider_message_id_for(idem_key: str) -> str:
    return f"sandbox-{idem_key[:32]}"


class SandboxConnector(Connector):
    channel = Channel.SANDBOX
    # Its records are this database: a lookup is exact at once (and a simulation's clock is virtual).
    settle_seconds = 0
    records_in_database = True

    def send(self, message: OutboundMessage) -> SendResult:
        outage = outages.active(message.metadata.get("run_id"), at=message.sent_at, kinds=outages.PROVIDER_KINDS,
                                channel=message.channel)
        if outage is not None and outage.kind != "provider_timeout":
            raise _outage_error(outage)
        # One statement, no transaction around it: an insert that does nothing on the unique key, so a resend
        # after a crash keeps the first row, whose provider id is the same (it derives from the key).
        accepted_at = message.sent_at or timezone.now()
        provider_message_id = provider_message_id_for(message.idem_key)
        with _prepared_cursor() as cursor:
            cursor.execute(INSERT_SQL, {
                "organization": self.identity.organization_id, "channel": message.channel, "key": message.idem_key,
                "to": message.to, "payload": json.dumps(_payload(message)), "provider_id": provider_message_id,
                "at": accepted_at, "unflushed": commits.in_own_transaction(cursor.db),
            })
        if outage is not None:
            # The provider took it but the answer never came back: only a lookup can tell it was sent.
            raise _outage_error(outage)
        return SendResult(provider_message_id=provider_message_id, accepted_at=accepted_at)

    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        # The sandbox is its own database: it always knows (never None).
        row = SandboxMessage.objects.filter(idem_key=message.idem_key).only("provider_message_id").first()
        return LookupResult(found=row is not None, provider_message_id=row.provider_message_id if row else None)

    def verify_request(self, request: HttpRequest) -> bool:
        signature = request.headers.get(SIGNATURE_HEADER, "")
        return bool(signature) and constant_time_compare(signature, sign_body(request.body))

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        # The signature covers the body only: the same signature is the same post again.
        return SignatureStamp(nonce=request.headers.get(SIGNATURE_HEADER) or None)

    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        data = json.loads(request.body)
        items = data["messages"] if isinstance(data, dict) and "messages" in data else [data]
        return [_parsed(item) for item in items]


# In its own implicit transaction (a send is made outside any), the insert commits without waiting for its WAL to
# reach the disk (connectors.commits; `unflushed`). After a database crash the commits that survive are a prefix of
# the WAL's order: this row is lost only with every commit that came after it, the fence that records its outbox
# row `sent` among them. The row is then still `sending`, its lookup finds nothing and it is sent again under the
# same key (the same message and provider id; at most one row per key). Flushed by the next commit that waits, or
# by the WAL writer within moments. Inside a caller's transaction its commit is as the caller chose.
INSERT_SQL = f"""
INSERT INTO connectors_sandboxmessage (organization_id, channel, idem_key, recipient, payload, provider_message_id,
                                       created_at)
SELECT %(organization)s, %(channel)s, %(key)s, %(to)s, %(payload)s::jsonb, %(provider_id)s, %(at)s
  FROM {commits.UNFLUSHED_FROM}
ON CONFLICT (idem_key) DO NOTHING
"""  # noqa: S608 (constants; every value is a parameter)


def _prepared_cursor() -> CursorWrapper:
    """A cursor on the default connection that prepares its statements, behind Django's wrappers as
    `connection.cursor()`'s is (query logging, execute wrappers, database errors as Django's)."""
    db = connected()
    with db.wrap_database_errors:
        raw = PreparingCursor(db.connection)
    return PreparedDebugWrapper(raw, db) if db.queries_logged else CursorWrapper(raw, db)


def _outage_error(outage: outages.Window) -> ConnectorError:
    """What a real provider's client raises in such an outage (connectors.errors)."""
    if outage.kind == "provider_timeout":
        return ConnectorError("sandbox: simulated timeout after the request was sent", code="timeout",
                              outcome_unknown=True)
    if outage.kind == "provider_429":
        return ConnectorError("sandbox: simulated HTTP 429 Too Many Requests", code="429")
    return ConnectorError("sandbox: simulated connection refused", code="unreachable")


def _payload(message: OutboundMessage) -> dict[str, Any]:
    return {
        "subject": message.subject,
        "body": message.body,
        "brief": message.brief,
        "reply_to": message.reply_to,
        "in_reply_to": message.in_reply_to,
        "references": list(message.references),
        "run_token": message.run_token,
        "metadata": message.metadata,
    }


def _parsed(item: dict[str, Any]) -> ParsedInbound:
    kind = item.get("kind", "message")
    if kind not in INBOUND_KINDS:
        raise ValueError(f"unknown inbound kind {kind!r}")
    return ParsedInbound(
        provider_id=str(item["provider_id"]),
        kind=kind,
        from_address=item.get("from", ""),
        to_address=item.get("to", ""),
        subject=item.get("subject", ""),
        text=item.get("text", ""),
        attachments=list(item.get("attachments", [])),
        headers=dict(item.get("headers", {})),
        in_reply_to=item.get("in_reply_to"),
        references=list(item.get("references", [])),
        thread_ref=item.get("thread_ref"),
        status=item.get("status"),
        idem_key=item.get("idem_key"),
        raw=item,
    )


__all__ = ["SIGNATURE_HEADER", "SandboxConnector", "provider_message_id_for", "sign_body"]
