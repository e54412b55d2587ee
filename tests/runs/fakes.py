"""Stand-ins for the agent loop and the follow-up policy (other modules), for runtime tests."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runs.context import EpisodeContext, EpisodeOutcome


@dataclass
class Step:
    """The shape runs.policy.plan_next returns (NextStep)."""

    action: str = "idle"
    due_at: datetime | None = None
    channel: str | None = None
    step: int | None = None
    wake_when: str | None = None
    state_updates: dict = field(default_factory=dict)
    reason: str = ""


class FakeLoop:
    """Records the episodes it ran; `behaviour(ctx)` may write (under ctx.fence()), raise, or block."""

    def __init__(self, behaviour: Callable[[EpisodeContext], EpisodeOutcome | None] | None = None) -> None:
        self.behaviour = behaviour
        self.calls: list[tuple[int, int]] = []  # (episode seq, epoch)

    def __call__(self, ctx: EpisodeContext) -> EpisodeOutcome:
        self.calls.append((ctx.episode.seq, ctx.epoch))
        outcome = self.behaviour(ctx) if self.behaviour else None
        return outcome or EpisodeOutcome()


class FakePolicy:
    """Always answers `step`; records the event kinds it was asked about."""

    def __init__(self, step: Step | None = None) -> None:
        self.step = step or Step()
        self.asked: list[str] = []

    def __call__(self, run, episode, outcome) -> Step:
        self.asked.append(episode.kind)
        return self.step


def followup_in(days: int, *, now: datetime, step: int = 1) -> Step:
    return Step(action="followup", due_at=now + timedelta(days=days), channel="email", step=step,
                wake_when=f"followup:{step}", state_updates={"attempts": step})


def install(
    monkeypatch, *, loop: FakeLoop | None = None, policy: FakePolicy | None = None
) -> tuple[FakeLoop, FakePolicy]:
    """Route runs.execution to the fake loop and runs.decisions to the fake policy."""
    loop = loop or FakeLoop()
    policy = policy or FakePolicy()
    monkeypatch.setattr("runs.execution.run_loop", loop)
    monkeypatch.setattr("runs.decisions.plan_next", policy)
    return loop, policy


def queued_run_ids() -> list[int]:
    """Run ids of the advance_run tasks waiting in django-q2's ORM queue, in insertion order."""
    from django_q.models import OrmQ

    return [row.task["args"][0] for row in OrmQ.objects.order_by("id")]
