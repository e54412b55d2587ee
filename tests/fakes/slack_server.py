"""A fake Slack Web API (chat.postMessage, conversations.open/history/replies) for the real WebClient."""

from __future__ import annotations

import itertools
import time
from typing import Any

from tests.fakes.provider_server import FakeServer, Recorded, Reply

ARCHIVED = "C0ARCHIVED"


class SlackServer(FakeServer):
    def __init__(self, *, bot_token: str) -> None:
        super().__init__()
        self.bot_token = bot_token
        # channel id -> messages, oldest first
        self.channels: dict[str, list[dict[str, Any]]] = {}
        self._ts = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"{self.url}/api/"

    def respond(self, request: Recorded) -> Reply:
        if request.headers.get("authorization") != f"Bearer {self.bot_token}":
            return Reply(200, {"ok": False, "error": "invalid_auth"})
        method = request.path.removeprefix("/api/")
        args = request.json() if request.headers.get("content-type", "").startswith("application/json") else {
            name: values[0] for name, values in {**request.query, **request.form}.items()
        }
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return Reply(200, {"ok": False, "error": "unknown_method"})
        return Reply(200, handler(args))

    def post(self, channel: str, *, text: str, metadata: dict | None = None, thread_ts: str | None = None,
             at: float | None = None) -> dict[str, Any]:
        """Store a message as Slack would; returns it."""
        ts = f"{(at or time.time()):.0f}.{next(self._ts):06d}"
        message = {"type": "message", "text": text, "ts": ts, "bot_id": "B0LUCIA"}
        if metadata:
            message["metadata"] = metadata
        if thread_ts:
            message["thread_ts"] = thread_ts
        self.channels.setdefault(channel, []).append(message)
        return message

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._dm(args["channel"])
        if channel == ARCHIVED:
            return {"ok": False, "error": "is_archived"}
        message = self.post(channel, text=args.get("text", ""), metadata=args.get("metadata"),
                            thread_ts=args.get("thread_ts"))
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    def _conversations_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "channel": {"id": self._dm(args["users"])}}

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        rows = [m for m in self.channels.get(args["channel"], []) if "thread_ts" not in m]
        return self._page(rows, args)

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        rows = [m for m in self.channels.get(args["channel"], []) if m.get("thread_ts") == args["ts"]]
        return self._page(rows, args)

    def _page(self, rows: list[dict[str, Any]], args: dict[str, Any]) -> dict[str, Any]:
        oldest = float(args.get("oldest") or 0)
        include_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        out = []
        for message in reversed(rows):
            if float(message["ts"]) < oldest:
                continue
            shown = dict(message)
            if not include_metadata:
                shown.pop("metadata", None)
            out.append(shown)
        return {"ok": True, "messages": out, "has_more": False, "response_metadata": {"next_cursor": ""}}

    @staticmethod
    def _dm(target: str) -> str:
        # Posting to a user id lands in the bot's DM with them.
        return "D" + target[1:] if target[:1] in ("U", "W") else target
