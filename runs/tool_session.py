"""What one execution of an episode accumulates across its tool calls, and how a tool reports a failure.

Below the tools (runs.tools) and the outbound tools (runs.outbound), which both use it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from runs.context import EpisodeOutcome


@dataclass
class ToolSession:
    """What one execution of an episode accumulates across tool calls."""

    outcome: EpisodeOutcome = field(default_factory=EpisodeOutcome)
    # Calls per (tool, recipient) in this episode: the ordinal of the next send's idempotency key.
    sends: Counter = field(default_factory=Counter)
    # Set when the loop must not ask the model again (finish, a question for a human, a guardrail block).
    stop: bool = False


def error(message: str, **extra: object) -> dict:
    return {"ok": False, "error": message, **extra}
