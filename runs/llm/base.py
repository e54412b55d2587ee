"""The model layer's vocabulary: a chat request, a model's reply, the one error type, the provider protocol.

Requests and replies use the OpenAI Chat Completions shapes (messages, function
tools, tool calls) because every provider Lucia speaks to is OpenAI-compatible
or, like the scripted model, imitates it. Replies are plain data so the journal
can store them and a re-executed episode can rebuild them without the provider.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from decimal import Decimal
from json import encoder as json_encoder
from typing import Any, Protocol


def encoder(**options: Any) -> Callable[[Any], str]:
    """json.JSONEncoder(**options).encode, writing the same text, with its C encoder built once.

    JSONEncoder.encode builds a new C encoder at every call (about a microsecond here, more than encoding a
    small value), and an episode encodes a few dozen values. Without cycle markers: JSON data has no cycles
    (a cyclic value would exhaust the stack instead of raising ValueError)."""
    plain = json.JSONEncoder(**options)
    make = json_encoder.c_make_encoder
    if make is None or plain.indent is not None:
        return plain.encode
    quote = json_encoder.encode_basestring_ascii if plain.ensure_ascii else json_encoder.encode_basestring
    encode_value = make(None, plain.default, quote, None, plain.key_separator, plain.item_separator,
                        plain.sort_keys, plain.skipkeys, plain.allow_nan)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return quote(value)
        return "".join(encode_value(value, 0))

    return encode


_encode = encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> str:
    """One spelling per value (sorted keys, no spaces), so equal requests hash equally."""
    if isinstance(value, _FROZEN):
        return value.canonical
    return _encode(value)


class FrozenList(list):
    """A list no one changes again, carrying its canonical JSON (computed once, by `frozen`)."""

    canonical: str
    canonical_bytes: bytes


class FrozenDict(dict):
    """A dict no one changes again, carrying its canonical JSON (computed once, by `frozen`)."""

    canonical: str
    canonical_bytes: bytes


_FROZEN = (FrozenList, FrozenDict)


def frozen(value: list | dict) -> FrozenList | FrozenDict:
    """A shallow copy of `value` that carries its canonical JSON, for a part every request of a plan (its tools,
    its scripted hints, its system message) or of an episode (its facts, its user message) repeats: a request
    spells it without encoding it again. Neither the copy nor anything inside it may change afterwards.
    A frozen value one level down (the hints in the facts) is taken as it already is."""
    copy = FrozenList(value) if isinstance(value, list) else FrozenDict(value)
    copy.canonical_bytes = _canonical_bytes(value)
    copy.canonical = copy.canonical_bytes.decode()
    return copy


def _canonical_bytes(value: Any) -> bytes:
    """canonical_json(value) in UTF-8, frozen values one level down (in a plain dict, list or tuple) taken as they
    already are.

    The same text: a dict's members sorted by key and joined by ",", so the members between two frozen ones
    are encoded together, as a dict of their own whose braces are dropped (a list's items likewise)."""
    if isinstance(value, _FROZEN):
        return value.canonical_bytes
    kind = type(value)
    if kind is dict:
        if not _any_frozen(value.values()) or not all(type(key) is str for key in value):
            return _encode(value).encode()  # json's own key conversions, if any: left to it
        parts: list[bytes] = []
        plain: dict = {}
        for key in sorted(value):
            item = value[key]
            if isinstance(item, _FROZEN):
                if plain:
                    parts.append(_encode(plain)[1:-1].encode())
                    plain = {}
                parts.append(_encode(key).encode() + b":" + item.canonical_bytes)
            else:
                plain[key] = item
        if plain:
            parts.append(_encode(plain)[1:-1].encode())
        return b"{" + b",".join(parts) + b"}"
    if (kind is list or kind is tuple) and _any_frozen(value):
        parts = []
        items: list = []
        for item in value:
            if isinstance(item, _FROZEN):
                if items:
                    parts.append(_encode(items)[1:-1].encode())
                    items = []
                parts.append(item.canonical_bytes)
            else:
                items.append(item)
        if items:
            parts.append(_encode(items)[1:-1].encode())
        return b"[" + b",".join(parts) + b"]"
    return _encode(value).encode()


def _any_frozen(items: Any) -> bool:
    for item in items:
        if isinstance(item, _FROZEN):
            return True
    return False


def function_tools(plan_tools: list[dict]) -> list[dict]:
    """OpenAI function tools from the plan's tools ([{name, description, parameters}])."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for tool in plan_tools
    ]


@dataclass(frozen=True)
class ChatRequest:
    """One call to a model.

    `metadata` carries the structured facts of the episode for the scripted
    model (see runs/llm/scripted.py for its keys). It is part of the request
    hash but is never sent to a remote provider: a real model reads the same
    facts from the context message in `messages`.
    """

    model: str
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    temperature: float = 0.2
    metadata: dict = field(default_factory=dict)

    def request_hash(self) -> str:
        """sha256 of the canonical request: the journal's replay key (with the episode and occurrence).

        Computed once per request (the loop, the journal and the scripted model all ask): a request is not
        changed after it is built."""
        known = self.__dict__.get("_request_hash")
        if known is None:
            # canonical_json({"model", "messages", "tools", "temperature", "metadata"}), its members in key order,
            # fed to the digest as written; split down to the messages and the metadata's values, where the plan's
            # and the episode's frozen parts are.
            digest = hashlib.sha256(b'{"messages":')
            digest.update(_canonical_bytes(self.messages))
            digest.update(b',"metadata":')
            digest.update(_canonical_bytes(self.metadata))
            digest.update(f',"model":{_encode(self.model)},"temperature":{_encode(self.temperature)}'
                          f',"tools":'.encode())
            digest.update(_canonical_bytes(self.tools))
            digest.update(b"}")
            known = digest.hexdigest()
            object.__setattr__(self, "_request_hash", known)
        return known

    def tool_names(self) -> list[str]:
        """The function tools' names, listed once per request (the model and the journal's summary both ask);
        the list is the request's: not to be changed."""
        known = self.__dict__.get("_tool_names")
        if known is None:
            known = [tool.get("function", {}).get("name", "") for tool in self.tools]
            object.__setattr__(self, "_tool_names", known)
        return known


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict


@dataclass(frozen=True)
class ModelReply:
    """What a model answered. `raw` is JSON-serialisable provider detail (usage, notes), never secrets."""

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    tokens_in: int
    tokens_out: int
    cost: Decimal
    model_name: str
    provider: str
    raw: dict = field(default_factory=dict)
    # True when rebuilt from the journal: nothing was paid for this reply.
    replayed: bool = False

    def assistant_message(self) -> dict:
        """The reply as an assistant message, for the next request's `messages`."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": canonical_json(call.arguments)},
                }
                for call in self.tool_calls
            ]
        return message

    def as_data(self) -> dict:
        """The journal's copy of the reply (tokens, cost and labels live in the entry's own columns)."""
        return {
            "content": self.content,
            "tool_calls": [{"id": call.id, "name": call.name, "arguments": _json_copy(call.arguments)}
                           for call in self.tool_calls],
            "finish_reason": self.finish_reason,
            "raw": self.raw,
        }

    @classmethod
    def from_data(
        cls, data: dict, *, tokens_in: int, tokens_out: int, cost: Decimal, model_name: str, provider: str,
        replayed: bool = False,
    ) -> ModelReply:
        return cls(
            content=data.get("content"),
            tool_calls=[ToolCall(**call) for call in data.get("tool_calls", [])],
            finish_reason=data.get("finish_reason", ""),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost=Decimal(cost),
            model_name=model_name,
            provider=provider,
            raw=data.get("raw", {}),
            replayed=replayed,
        )


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data, as dataclasses.asdict copies a dataclass's fields (without its
    per-value dispatch and deepcopy): strings, numbers, booleans and None are shared, never changed."""
    if type(value) is dict:
        return {key: _json_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_json_copy(item) for item in value]
    if type(value) in (str, int, float, bool) or value is None:
        return value
    return deepcopy(value)


class ModelError(Exception):
    """A model call that produced no usable reply.

    `retryable`: a later attempt may succeed (timeouts, 429, 5xx, malformed
    output); otherwise (bad credentials, a request the provider rejects) retrying
    only repeats the failure. `retry_after` is the provider's hint in seconds.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


class ModelProvider(Protocol):
    name: str

    def complete(self, request: ChatRequest) -> ModelReply: ...
