"""A local HTTP server speaking OpenAI's Chat Completions protocol, so tests run the real `openai` client.

    with FakeOpenAIServer() as server:
        server.enqueue(error(429), completion(tool_calls=[("send_email", {"to": "vendor"})]))
        provider = OpenAIProvider(base_url=server.base_url, api_key="test")
        ...
        assert server.request_count == 2

Each POST /v1/chat/completions takes the next queued response; when the queue
is empty the `default` answers (a short text completion). A queued item may
also be a callable taking the request body and returning a response.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# stop() waits for serve_forever's next poll: the 0.5 s default cost a test up to half a second per fake.
SHUTDOWN_POLL_S = 0.05


@dataclass
class FakeResponse:
    status: int = 200
    body: dict | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds to wait before answering: longer than the client's timeout makes a timeout.
    delay: float = 0.0


def completion(*, content: str | None = None, tool_calls: list[tuple[str, dict | str]] = (),
               usage: tuple[int, int] | None = (120, 30), model: str = "gpt-4o-mini-2024-07-18",
               finish_reason: str | None = None) -> FakeResponse:
    """A successful completion; tool call arguments given as a string are sent verbatim (for malformed JSON)."""
    calls = [
        {
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for index, (name, args) in enumerate(tool_calls)
    ]
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    body: dict = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return FakeResponse(body=body)


def error(status: int, message: str = "fake error", *, headers: dict[str, str] | None = None) -> FakeResponse:
    kinds = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}
    kind = kinds.get(status, "server_error")
    return FakeResponse(status=status, body={"error": {"message": message, "type": kind, "code": kind}},
                        headers=headers or {})


def stall(seconds: float) -> FakeResponse:
    """Answers only after `seconds`; with a shorter client timeout the client gives up first."""
    return FakeResponse(delay=seconds, body=completion(content="too late").body)


def garbage() -> FakeResponse:
    """A 200 whose body is not JSON at all."""
    return FakeResponse(body="<html>upstream proxy error</html>", headers={"Content-Type": "application/json"})


Responder = FakeResponse | Callable[[dict], FakeResponse]


class FakeOpenAIServer:
    def __init__(self, *, default: Responder | None = None) -> None:
        self.default: Responder = default or completion(content="ok")
        self.requests: list[dict] = []
        self._queue: deque[Responder] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def enqueue(self, *responses: Responder) -> None:
        with self._lock:
            self._queue.extend(responses)

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next(self, body: dict) -> FakeResponse:
        with self._lock:
            self.requests.append(body)
            responder = self._queue.popleft() if self._queue else self.default
        return responder(body) if callable(responder) else responder


def _handler_for(fake: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(FakeResponse(status=404, body={"error": {"message": f"no route {self.path}"}}))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode(errors="replace")}
            body["_headers"] = {key.lower(): value for key, value in self.headers.items()}
            self._send(fake._next(body))

        def _send(self, response: FakeResponse) -> None:
            if response.delay:
                time.sleep(response.delay)  # the server stalls; the client under test times out
            payload = response.body if isinstance(response.body, str) else json.dumps(response.body)
            data = payload.encode()
            try:
                self.send_response(response.status)
                headers = {"Content-Type": "application/json", **response.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client already gave up (timeout tests)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            pass

    return Handler
