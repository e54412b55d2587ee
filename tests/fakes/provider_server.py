"""A local HTTP server in a thread, recording every request; provider fakes subclass it.

The real client libraries talk to it over a socket, so their request building,
auth, pagination and error handling all run.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# stop() waits for serve_forever's next poll: the 0.5 s default cost a test up to half a second per fake.
SHUTDOWN_POLL_S = 0.05


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    form: dict[str, list[str]] = field(default_factory=dict)

    def first(self, name: str) -> str | None:
        values = self.form.get(name) or self.query.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)

    def basic_auth(self) -> tuple[str, str] | None:
        value = self.headers.get("authorization", "")
        if not value.lower().startswith("basic "):
            return None
        user, _, password = base64.b64decode(value[6:]).decode().partition(":")
        return user, password


@dataclass
class Reply:
    status: int
    body: Any
    content_type: str = "application/json"


class FakeServer:
    """Subclasses implement `respond(request) -> Reply`. `fail_with(500)` makes every call fail.

    Faults after the provider did the work (the outcome is unknown to the client):
    `answer_after_processing(502)` processes each request, then answers with that
    status; `stall_after_processing(seconds)` processes it, then waits before
    answering (the client times out); `drop_after_processing()` processes it,
    then closes the connection without an answer (a reset after sending).
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.failure: int | None = None
        self.failure_after: int | None = None
        self.stall_s: float = 0.0
        self.drop = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def refuse_connections(self) -> None:
        """Close the listening socket: a client now gets "connection refused", as during a provider outage."""
        self.stop()

    def accept_connections(self) -> None:
        """Listen again on the same port after `refuse_connections`."""
        self._server = ThreadingHTTPServer(self._server.server_address[:2], _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)
        self._thread.start()

    def fail_with(self, status: int | None) -> None:
        self.failure = status

    def answer_after_processing(self, status: int | None) -> None:
        self.failure_after = status

    def stall_after_processing(self, seconds: float) -> None:
        self.stall_s = seconds

    def drop_after_processing(self, drop: bool = True) -> None:
        self.drop = drop

    def healthy(self) -> None:
        """Every fault off."""
        self.failure = self.failure_after = None
        self.stall_s, self.drop = 0.0, False

    def calls_to(self, suffix: str, *, method: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(suffix) and (method is None or r.method == method)]

    def handle(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.failure:
                return Reply(self.failure, {"error": "fake failure", "status": self.failure})
            reply = self.respond(request)
            if self.failure_after:
                return Reply(self.failure_after, {"error": "fake failure after processing",
                                                  "status": self.failure_after})
            return reply

    def respond(self, request: Recorded) -> Reply:
        raise NotImplementedError


def parse_form(content_type: str, body: bytes) -> dict[str, list[str]]:
    if content_type.startswith("application/x-www-form-urlencoded"):
        return parse_qs(body.decode(), keep_blank_values=True)
    if content_type.startswith("multipart/form-data"):
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        form: dict[str, list[str]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            form.setdefault(name, []).append(payload.decode(errors="replace"))
        return form
    return {}


def _handler_for(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            headers = {name.lower(): value for name, value in self.headers.items()}
            recorded = Recorded(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                headers=headers,
                body=body,
                form=parse_form(headers.get("content-type", ""), body),
            )
            reply = fake.handle(recorded)
            if fake.drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fake.stall_s:
                time.sleep(fake.stall_s)  # the server side of a client timeout
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
            pass

    return Handler
