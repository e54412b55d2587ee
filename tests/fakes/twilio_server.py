"""A fake Twilio REST API (2010-04-01 Messages and Calls) for the real `twilio` client."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from tests.fakes.provider_server import FakeServer, Recorded, Reply

_LIST = re.compile(r"^/2010-04-01/Accounts/(?P<sid>[^/]+)/(?P<kind>Messages|Calls)\.json$")
ERRORS = {
    21610: "Attempt to send to unsubscribed recipient",
    21211: "The 'To' number is not a valid phone number.",
}


class TwilioServer(FakeServer):
    def __init__(self, *, account_sid: str, auth_token: str) -> None:
        super().__init__()
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.messages: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        # Recipient -> Twilio error code returned on create.
        self.refuse: dict[str, int] = {}
        self._ids = itertools.count(1)

    def respond(self, request: Recorded) -> Reply:
        match = _LIST.match(request.path)
        if not match or match["sid"] != self.account_sid:
            return Reply(404, {"code": 20404, "message": "The requested resource was not found", "status": 404})
        if request.basic_auth() != (self.account_sid, self.auth_token):
            return Reply(401, {"code": 20003, "message": "Authenticate", "status": 401})
        store = self.messages if match["kind"] == "Messages" else self.calls
        if request.method == "POST":
            return self._create(request, store, kind=match["kind"])
        return self._list(request, store, kind=match["kind"])

    def _create(self, request: Recorded, store: list[dict[str, Any]], *, kind: str) -> Reply:
        to = request.first("To") or ""
        if to in self.refuse:
            code = self.refuse[to]
            return Reply(400, {"code": code, "message": ERRORS.get(code, "Refused"), "status": 400,
                               "more_info": f"https://www.twilio.com/docs/errors/{code}"})
        prefix = "SM" if kind == "Messages" else "CA"
        record = {
            "sid": f"{prefix}{next(self._ids):032x}",
            "account_sid": self.account_sid,
            "to": to,
            "from": request.first("From"),
            "status": "queued",
            "direction": "outbound-api",
            "date_created": format_datetime(datetime.now(UTC), usegmt=True),
            "date_updated": format_datetime(datetime.now(UTC), usegmt=True),
            # Queued: not sent or started yet, as right after the create call.
            "date_sent": None,
            "start_time": None,
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/{kind}/x.json",
        }
        if kind == "Messages":
            record.update(body=request.first("Body"), num_segments="1", num_media="0")
        record["_status_callback"] = request.first("StatusCallback")
        record["_twiml"] = request.first("Twiml")
        store.append(record)
        return Reply(201, _public(record))

    def _list(self, request: Recorded, store: list[dict[str, Any]], *, kind: str) -> Reply:
        to, sender = request.first("To"), request.first("From")
        rows = [r for r in store if (not to or r["to"] == to) and (not sender or r["from"] == sender)]
        key = "messages" if kind == "Messages" else "calls"
        return Reply(200, {key: [_public(r) for r in reversed(rows)], "next_page_uri": None, "page": 0,
                           "page_size": 50, "start": 0, "end": len(rows), "uri": request.path,
                           "first_page_uri": request.path, "previous_page_uri": None})

    def add_message(self, *, to: str, sender: str, body: str, created: datetime) -> None:
        """A message sent earlier (another send, or the one whose outcome is unknown)."""
        self.messages.append({
            "sid": f"SM{next(self._ids):032x}", "account_sid": self.account_sid, "to": to, "from": sender,
            "body": body, "status": "delivered", "direction": "outbound-api",
            "date_created": format_datetime(created.astimezone(UTC), usegmt=True), "date_sent": None,
        })

    def add_call(self, *, to: str, sender: str, created: datetime) -> None:
        self.calls.append({
            "sid": f"CA{next(self._ids):032x}", "account_sid": self.account_sid, "to": to, "from": sender,
            "status": "completed", "direction": "outbound-api",
            "date_created": format_datetime(created.astimezone(UTC), usegmt=True), "start_time": None,
        })


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if not key.startswith("_")}
