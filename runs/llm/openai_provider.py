"""OpenAI (or any OpenAI-compatible server via OPENAI_BASE_URL) over Chat Completions with tools.

The only module that imports `openai`. The client never retries on its own
(`max_retries=0`): retries are bounded in runs/llm/journaled.py, where they are
counted and a spent bound escalates instead of sending. Tokens come from the
response's `usage`; cost is those tokens priced from PRICES, and a model
missing from PRICES costs 0 with a note in the reply's raw data (never a guess).
"""

from __future__ import annotations

import json
from decimal import Decimal

import openai
from django.conf import settings

from runs.llm.base import ChatRequest, ModelError, ModelReply, ToolCall

# USD per 1M tokens (input, output): OpenAI list prices for standard processing, 2025.
# Longest matching prefix wins, so dated snapshots ("gpt-4o-mini-2024-07-18") price as their family.
PRICES: dict[str, tuple[Decimal, Decimal]] = {
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
    "gpt-4.1-nano": (Decimal("0.10"), Decimal("0.40")),
    "gpt-4.1-mini": (Decimal("0.40"), Decimal("1.60")),
    "gpt-4.1": (Decimal("2.00"), Decimal("8.00")),
    "o4-mini": (Decimal("1.10"), Decimal("4.40")),
    "o3-mini": (Decimal("1.10"), Decimal("4.40")),
}
_MILLION = Decimal(1_000_000)

# Status codes worth another attempt besides 429 and 5xx: request timeout and lock conflict.
_RETRYABLE_STATUS = {408, 409}


def price(model: str, *, tokens_in: int, tokens_out: int) -> Decimal | None:
    """The cost of a call in USD, or None when the model has no entry in PRICES."""
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            rate_in, rate_out = PRICES[prefix]
            return (rate_in * tokens_in + rate_out * tokens_out) / _MILLION
    return None


class OpenAIProvider:
    name = "openai"

    def __init__(self, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float | None = None) -> None:
        # Settings are read here, not at import, so tests can point the provider at a fake server.
        self.base_url = base_url or settings.OPENAI_BASE_URL or None
        self.api_key = api_key or settings.OPENAI_API_KEY
        self.timeout = float(timeout if timeout is not None else settings.LUCIA_MODEL_TIMEOUT_S)
        self._client: openai.OpenAI | None = None

    def complete(self, request: ChatRequest) -> ModelReply:
        kwargs: dict = {"model": request.model, "messages": request.messages, "temperature": request.temperature}
        if request.tools:
            kwargs["tools"] = request.tools
        try:
            response = self._get_client().chat.completions.create(**kwargs)
        except openai.OpenAIError as error:
            raise _model_error(error) from error
        except json.JSONDecodeError as error:
            # A 200 whose body is not JSON (a proxy's error page): the client parses it and gives up.
            raise ModelError(f"openai: malformed output: the response is not JSON ({error})", retryable=True) from error
        return _reply(response, requested_model=request.model)

    def _get_client(self) -> openai.OpenAI:
        if self._client is None:
            if not self.api_key:
                # OpenAI-compatible local servers accept any key; an empty one is a configuration mistake.
                raise ModelError("OPENAI_API_KEY is not set", retryable=False)
            self._client = openai.OpenAI(
                api_key=self.api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0
            )
        return self._client


def _model_error(error: openai.OpenAIError) -> ModelError:
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return ModelError(f"openai: {type(error).__name__}: {error}", retryable=True)
    if isinstance(error, openai.APIResponseValidationError):
        return ModelError(f"openai: malformed output: {error}", retryable=True)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        retryable = status == 429 or status >= 500 or status in _RETRYABLE_STATUS
        return ModelError(
            f"openai: HTTP {status}: {error.message}", retryable=retryable, retry_after=_retry_after(error)
        )
    return ModelError(f"openai: {type(error).__name__}: {error}", retryable=False)


def _retry_after(error: openai.APIStatusError) -> float | None:
    value = error.response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date; the default backoff applies


def _reply(response: object, *, requested_model: str) -> ModelReply:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError("openai: malformed output: no choices in the response", retryable=True)
    choice = choices[0]
    message = choice.message
    tool_calls = [_tool_call(call) for call in message.tool_calls or []]
    notes: list[str] = []
    usage = response.usage
    if usage is None:
        notes.append("the response carried no usage: tokens recorded as 0")
    tokens_in = usage.prompt_tokens if usage else 0
    tokens_out = usage.completion_tokens if usage else 0
    model_name = response.model or requested_model
    cost = price(model_name, tokens_in=tokens_in, tokens_out=tokens_out)
    if cost is None:
        notes.append(f"no price known for model {model_name!r}: cost recorded as 0")
    raw = {
        "id": response.id,
        "model": model_name,
        "usage": usage.model_dump(mode="json", exclude_none=True) if usage else None,
        "system_fingerprint": getattr(response, "system_fingerprint", None),
    }
    if notes:
        raw["notes"] = notes
    return ModelReply(
        content=message.content,
        tool_calls=tool_calls,
        finish_reason=choice.finish_reason or "",
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost=cost or Decimal(0),
        model_name=model_name,
        provider=OpenAIProvider.name,
        raw=raw,
    )


def _tool_call(call: object) -> ToolCall:
    function = getattr(call, "function", None)
    if function is None:
        raise ModelError(f"openai: malformed output: unsupported tool call type {getattr(call, 'type', '?')!r}",
                         retryable=True)
    try:
        arguments = json.loads(function.arguments or "{}")
    except json.JSONDecodeError as error:
        raise ModelError(f"openai: malformed output: arguments of {function.name} are not JSON ({error})",
                         retryable=True) from error
    if not isinstance(arguments, dict):
        raise ModelError(f"openai: malformed output: arguments of {function.name} are not an object",
                         retryable=True)
    return ToolCall(id=call.id, name=function.name, arguments=arguments)
