"""What the agent loop gets for one episode, and what it hands back.

The loop (runs.loop.run_episode) reads from the context and writes only inside
`ctx.fence()`: a transaction that holds the run row and raises LeaseLost when
this worker no longer owns the run.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from runs import leases
from runs.models import Contact, Episode, Run, Task


@dataclass
class EpisodeContext:
    run_id: int
    epoch: int
    episode: Episode
    # Snapshots read when the episode started; re-read under the fence before writing.
    run: Run
    plan: dict
    contacts: list[Contact]
    tasks: list[Task]
    # The run's clock when the episode started (virtual in a simulation).
    now: datetime
    heartbeat: leases.Heartbeat | None = None

    @contextlib.contextmanager
    def fence(self) -> Iterator[Run]:
        """Yield the locked run row, or raise LeaseLost (also when the heartbeat already saw it lost)."""
        if self.heartbeat is not None:
            self.heartbeat.check()
        with leases.fence(self.run_id, epoch=self.epoch) as run:
            yield run


@dataclass
class EpisodeOutcome:
    """What the loop reports; the runtime, not the model, decides what follows."""

    # The agent called `finish`.
    finished: bool = False
    # The agent called `schedule_followup`: the next contact, already clamped to policy bounds by the tool.
    followup_override: datetime | None = None
    # The agent called `ask_human` (the escalation is already open).
    escalated: bool = False
    notes: list[str] = field(default_factory=list)
