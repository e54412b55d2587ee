"""Simulated outages: windows of virtual time in which a simulated run's provider or model fails.

The simulator arms them for the runs it drives in this process, and the
layers production already has see them as they would see a real outage: the
sandbox connector raises the ConnectorError a provider's client would
(connectors.sandbox), the model layer a retryable ModelError (runs.llm.simulated_outages).
Nothing is armed outside a simulation, so a real run never meets one.
Process-local on purpose: the simulator calls advance_run in its own process,
and a window is over when the case is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

PROVIDER_KINDS = ("provider_unreachable", "provider_429", "provider_timeout")
MODEL_KINDS = ("model_429", "model_timeout", "model_5xx")


@dataclass(frozen=True)
class Window:
    kind: str
    starts: datetime
    ends: datetime  # exclusive
    channel: str = ""  # provider faults: only sends on this channel ("" = every channel)

    def covers(self, at: datetime, *, channel: str = "") -> bool:
        return self.starts <= at < self.ends and (not self.channel or not channel or self.channel == channel)


_armed: dict[int, tuple[Window, ...]] = {}


def arm(run_id: int, windows: list[Window]) -> None:
    if windows:
        _armed[run_id] = tuple(windows)


def disarm(run_id: int) -> None:
    _armed.pop(run_id, None)


def active(run_id: int | None, *, at: datetime | None, kinds: tuple[str, ...], channel: str = "") -> Window | None:
    """The armed window of one of `kinds` covering `at` for this run, or None (always None for a real run)."""
    if run_id is None or at is None or run_id not in _armed:
        return None
    return next((w for w in _armed[run_id] if w.kind in kinds and w.covers(at, channel=channel)), None)
