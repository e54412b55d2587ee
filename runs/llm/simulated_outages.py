"""A simulated run's model calls inside an armed outage window (connectors.outages) fail as a provider's would.

The error is the one runs.llm.openai_provider raises for the same outage
(retryable, with the provider's Retry-After for a 429), so the retries,
backoff and escalation that follow are production's own.
"""

from __future__ import annotations

from datetime import datetime

from connectors import outages
from runs.llm.base import ChatRequest, ModelError, ModelProvider, ModelReply

RETRY_AFTER_S = 30.0
ERRORS = {
    "model_429": ("HTTP 429: Rate limit reached (simulated outage)", RETRY_AFTER_S),
    "model_5xx": ("HTTP 503: The server is overloaded (simulated outage)", None),
    "model_timeout": ("APITimeoutError: Request timed out (simulated outage)", None),
}


class OutageProvider:
    """`inner` during an outage: every call fails as the real provider's would."""

    def __init__(self, inner: ModelProvider, *, window: outages.Window) -> None:
        self.inner = inner
        self.name = inner.name
        self.window = window

    def complete(self, request: ChatRequest) -> ModelReply:
        message, retry_after = ERRORS[self.window.kind]
        raise ModelError(f"{self.inner.name}: {message}", retryable=True, retry_after=retry_after)


def wrap(provider: ModelProvider, *, run_id: int | None, at: datetime | None) -> ModelProvider:
    """The provider as the run sees it at `at` (its episode's time): failing inside an armed window, else itself."""
    window = outages.active(run_id, at=at, kinds=outages.MODEL_KINDS)
    return provider if window is None else OutageProvider(provider, window=window)
