"""The Twilio fake of the chaos run: the real `twilio` client talks to it, and it misbehaves on request.

Two faults: lookups (the Messages list call, "was this sent?") that fail with a
500, for some recipients all along or for everyone during a window; and an
outage, during which the port refuses connections, so nothing leaves the
worker's process.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.provider_server import Recorded, Reply
from tests.fakes.twilio_server import TwilioServer

ACCOUNT_SID = "AC" + "c" * 32
AUTH_TOKEN = "chaos-twilio-auth-token"  # noqa: S105 - the fake's own credential


class ChaosTwilio(TwilioServer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, **kwargs)
        self.lookups_down = False
        self.lookups_down_for: set[str] = set()
        self.failed_lookups = 0
        self.down = False
        self._state = threading.Lock()

    def respond(self, request: Recorded) -> Reply:
        if request.method == "GET" and (self.lookups_down or request.first("To") in self.lookups_down_for):
            self.failed_lookups += 1
            return Reply(500, {"code": 20500, "message": "Internal Server Error", "status": 500})
        return super().respond(request)

    def go_down(self) -> None:
        with self._state:
            if not self.down:
                self.refuse_connections()
                self.down = True

    def come_up(self) -> None:
        with self._state:
            if self.down:
                self.accept_connections()
                self.down = False

    def sent(self) -> list[dict[str, Any]]:
        """Every message the fake accepted, with the idempotency key our status callback carries."""
        with self._lock:
            return [{**message, "idem_key": idem_key_of(message)} for message in self.messages]

    def duplicate_keys(self) -> list[str]:
        counts = Counter(message["idem_key"] for message in self.sent())
        return sorted(key for key, count in counts.items() if count > 1)

    def duplicate_texts(self) -> list[tuple[str, str]]:
        counts = Counter((message["to"], message["body"]) for message in self.sent())
        return sorted(pair for pair, count in counts.items() if count > 1)


def idem_key_of(message: dict[str, Any]) -> str:
    """The outbox key Lucia put in the message's status callback URL (`?k=`); empty when missing."""
    return parse_qs(urlsplit(message.get("_status_callback") or "").query).get("k", [""])[0]
