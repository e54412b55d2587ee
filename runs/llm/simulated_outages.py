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
    """`inner`, except that each call inside the window raises."""

    def __init__(self, inner: ModelProvider, *, run_id: int, at: datetime) -> None:
        self.inner = inner
        self.name = inner.name
        self.run_id = run_id
        self.at = at

    def complete(self, request: ChatRequest) -> ModelReply:
        window = outages.active(self.run_id, at=self.at, kinds=outages.MODEL_KINDS)
        if window is not None:
            message, retry_after = ERRORS[window.kind]
            raise ModelError(f"{self.inner.name}: {message}", retryable=True, retry_after=retry_after)
        return self.inner.complete(request)


def wrap(provider: ModelProvider, *, run_id: int | None, at: datetime | None) -> ModelProvider:
    """The provider as this run sees it at `at`: wrapped only while the simulator has windows armed for it."""
    if run_id is None or at is None or not outages.armed(run_id):
        return provider
    return OutageProvider(provider, run_id=run_id, at=at)
