"""A fake Mailgun API (messages send, Events API) for anymail's Mailgun backend.

Like Mailgun, it keeps a supplied `h:Message-Id` as the message id and logs an
"accepted" event carrying the message's user-variables (`v:*` fields).
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

from tests.fakes.provider_server import FakeServer, Recorded, Reply

_MESSAGES = re.compile(r"^/v3/(?P<domain>[^/]+)/messages$")
_EVENTS = re.compile(r"^/v3/(?P<domain>[^/]+)/events$")


class MailgunServer(FakeServer):
    def __init__(self, *, api_key: str, domain: str) -> None:
        super().__init__()
        self.api_key = api_key
        self.domain = domain
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    @property
    def api_url(self) -> str:
        return f"{self.url}/v3/"

    def respond(self, request: Recorded) -> Reply:
        if request.basic_auth() != ("api", self.api_key):
            return Reply(401, b"Forbidden", content_type="text/plain")
        if (match := _MESSAGES.match(request.path)) and request.method == "POST":
            if match["domain"] != self.domain:
                return Reply(404, {"message": "Domain not found: " + match["domain"]})
            return self._send(request)
        if (match := _EVENTS.match(request.path)) and request.method == "GET":
            return self._events(request)
        return Reply(404, {"message": "not found"})

    def _send(self, request: Recorded) -> Reply:
        message_id = request.first("h:Message-Id") or f"<{next(self._ids)}.fake@{self.domain}>"
        variables = {name[2:]: values[-1] for name, values in request.form.items() if name.startswith("v:")}
        for recipient in request.form.get("to", []):
            self.add_event(recipient=re.sub(r".*<(.+)>.*", r"\1", recipient), message_id=message_id,
                           variables=variables)
        return Reply(200, {"id": message_id, "message": "Queued. Thank you."})

    def add_event(self, *, recipient: str, message_id: str, variables: dict[str, str],
                  at: float | None = None) -> None:
        self.events.append({
            "event": "accepted",
            "id": f"ev{next(self._ids)}",
            "timestamp": at or time.time(),
            "recipient": recipient,
            "user-variables": variables,
            "message": {"headers": {"message-id": message_id.strip("<>"), "to": recipient}},
        })

    def _events(self, request: Recorded) -> Reply:
        begin = float(request.first("begin") or 0)
        wanted = {name: request.first(name) for name in ("event", "recipient")}
        items = [
            e for e in self.events
            if e["timestamp"] >= begin and all(not v or e.get(k) == v for k, v in wanted.items())
        ]
        return Reply(200, {"items": items, "paging": {"next": f"{self.api_url}{self.domain}/events/next"}})
