"""What the agent loop gets for one episode, and what it hands back.

The loop (runs.loop.run_episode) reads from the context and writes only inside
`ctx.fence()`: a transaction that holds the run row and raises LeaseLost when
this worker no longer owns the run.

Journal entries the loop writes between two side effects (a model reply and
the tool call it asks for; one tool's result and the next tool's call) wait in
`pending` and go out with the next fenced write, in order, in its transaction:
`fence()` writes them first. Nothing that leaves the process (a send, a model
call's payment) ever happens while an entry that precedes it is only pending,
except a tool's result, which may wait across the next model call (a crash
there re-executes the tool, and its result is journaled again).
"""

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from runs import episode_loads, journal, lease_renewals, leases
from runs.episode_facts import EpisodeFacts
from runs.models import Contact, Episode, Run, Task, TaskStatus


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
    heartbeat: lease_renewals.Heartbeat | None = None
    # Journal entries waiting for the next fenced write (see the module docstring).
    pending: list[journal.Entry] = field(default_factory=list)
    # The run row as this episode's last fence locked it, usage counters included; None before the first.
    latest: Run | None = None
    # Tasks this execution marked done. Only the lease holder changes tasks, so with `tasks` this is exact.
    done_keys: set[str] = field(default_factory=set)
    # What the episode reads of its run, read with its start (runs.episode_loads); see `facts`.
    loaded_facts: EpisodeFacts | None = None
    # Writes that wait for the next fence like the pending journal entries, in its own statement: a send's
    # result (runs.outbox.record_sent), so the episode's close records it.
    pending_riders: list[leases.Rider] = field(default_factory=list)
    # time.monotonic() when this episode's last fenced write that succeeded was sent: that write extended the lease
    # to LUCIA_LEASE_SECONDS from then at least (runs.tool_executor._confirm_lease); None before the first.
    fenced_at: float | None = None
    # Who holds the lease of `epoch` (runs.leases: both are checked); None accepts any holder (tests, tools).
    owner: str | None = None

    @property
    def facts(self) -> EpisodeFacts:
        """The episode's facts (runs.episode_facts): read with its start, or now on first use."""
        if self.loaded_facts is None:
            self.loaded_facts = episode_loads.facts_for(self.run, self.episode, plan=self.plan)
        return self.loaded_facts

    @contextlib.contextmanager
    def fence(self, *, rider: leases.Rider | None = None) -> Iterator[Run]:
        """Yield the locked run row, or raise LeaseLost (also when the heartbeat already saw it lost).

        Pending journal entries and pending writes are written by the fence's own statement, with `rider`;
        if the transaction rolls back they are pending again.
        """
        taken = self._take()
        try:
            with transaction.atomic():
                yield self._write(taken, rider)
        except BaseException:
            self._put_back(taken)
            raise

    def write(self, rider: leases.Rider | None = None) -> Run:
        """A fenced write in one statement and no transaction around it (runs.leases.write): the pending
        entries and writes, and `rider`. Returns the run row as it left it; raises LeaseLost like `fence`."""
        taken = self._take()
        try:
            return self._write(taken, rider)
        except BaseException:
            self._put_back(taken)
            raise

    def _take(self) -> tuple[list[journal.Entry], list[leases.Rider]]:
        if self.heartbeat is not None:
            self.heartbeat.check()
        taken = (self.pending, self.pending_riders)
        self.pending, self.pending_riders = [], []
        return taken

    def _put_back(self, taken: tuple[list[journal.Entry], list[leases.Rider]]) -> None:
        self.pending[:0] = taken[0]
        self.pending_riders[:0] = taken[1]

    def _write(self, taken: tuple[list[journal.Entry], list[leases.Rider]], rider: leases.Rider | None) -> Run:
        combined = leases.joined([journal.rider(taken[0]), *taken[1], *((rider,) if rider is not None else ())])
        sent = time.monotonic()
        run = leases.write(self.run_id, epoch=self.epoch, owner=self.owner, rider=combined, known=self.run)
        self.fenced_at = sent
        if Run.organization.is_cached(self.run):
            run.organization = self.run.organization
        self.latest = run
        return run

    def journal(self, kind: str, data: dict, **model_fields) -> None:
        """Queue an entry for the next fenced write (runs.tools.record writes at once)."""
        self.pending.append(journal.Entry(episode_id=self.episode.pk, kind=kind, data=data, at=self.now,
                                          **model_fields))

    def flush(self) -> None:
        """Write pending journal entries (and pending writes) now."""
        if self.pending or self.pending_riders:
            self.write()

    def usage(self) -> Run:
        """The run row with its usage counters as they stand now, to check budgets before a model call.

        A pending paid call is written first (so a crash never pays for it twice);
        after that the last fence's row is current: every charge is a fenced
        journal write, and the guardrail model's own write (journaled.call_model)
        is always followed by a fenced `guardrail` entry.
        """
        if any(entry.charges for entry in self.pending):
            self.flush()
        return self.latest or self.run

    def open_task_keys(self) -> set[str]:
        return {t.key for t in self.tasks if t.status == TaskStatus.OPEN and t.key not in self.done_keys}


@dataclass
class EpisodeOutcome:
    """What the loop reports; the runtime, not the model, decides what follows."""

    # The agent called `finish`.
    finished: bool = False
    # The agent called `schedule_followup`: the next contact, already clamped to policy bounds by the tool.
    followup_override: datetime | None = None
    # The earliest `not_before` of sends this episode held (send window, per-contact caps): they go out then,
    # in a flush episode, and do not move the next contact.
    held_until: datetime | None = None
    # The agent called `ask_human` (the escalation is already open).
    escalated: bool = False
    notes: list[str] = field(default_factory=list)
