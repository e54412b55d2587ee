"""The journal: the append-only record of what a run did, and the store model calls are replayed from.

The only module that writes JournalEntry. Every write is fenced by the run's
lease (runs.leases.fence), so a worker that lost its lease records nothing, and
the fence's row lock serialises a run's writers, which makes `max(seq) + 1` safe.
Entries written together (`write`) take consecutive seqs in one transaction:
one seq lookup and one insert for the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import F, Max, QuerySet

from runs import leases
from runs.models import JournalEntry, JournalKind, Run

COST_PLACES = Decimal(1).scaleb(-Run._meta.get_field("cost_used").decimal_places)


@dataclass(frozen=True)
class Entry:
    """One entry to write; `steps` is the number of budgeted steps it stands for (1 for a paid model call)."""

    episode_id: int | None
    kind: str
    data: dict
    at: datetime
    request_hash: str = ""
    model_name: str = ""
    model_provider: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    steps: int = 0

    def __post_init__(self) -> None:
        if self.kind not in JournalKind.values:
            raise ValueError(f"unknown journal kind {self.kind!r}")

    @property
    def charges(self) -> bool:
        return bool(self.tokens_in or self.tokens_out or self.cost or self.steps)


def append(
    run_id: int,
    *,
    epoch: int,
    episode_id: int | None,
    kind: str,
    data: dict,
    at: datetime,
    request_hash: str = "",
    model_name: str = "",
    model_provider: str = "",
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost: Decimal = Decimal(0),
    steps: int = 0,
) -> JournalEntry:
    """Record one entry and charge its usage to the run, in one fenced transaction. Raises LeaseLost."""
    entry = Entry(
        episode_id=episode_id, kind=kind, data=data, at=at, request_hash=request_hash, model_name=model_name,
        model_provider=model_provider, tokens_in=tokens_in, tokens_out=tokens_out, cost=cost, steps=steps,
    )
    with leases.fence(run_id, epoch=epoch) as run:
        return write(run, [entry])[0]


def write(run: Run, entries: Sequence[Entry]) -> list[JournalEntry]:
    """Record `entries` in order and charge their usage to the run; call under the run's fence with its locked row.

    Tokens, cost and steps land in the run's usage counters in the same
    transaction, so usage and journal never disagree; `run`'s counters are
    brought up to date too (the lock makes them exact).
    """
    if not entries:
        return []
    last = JournalEntry.objects.filter(run_id=run.pk).aggregate(last=Max("seq"))["last"] or 0
    rows = JournalEntry.objects.bulk_create([
        JournalEntry(
            run_id=run.pk, episode_id=entry.episode_id, seq=last + offset, kind=entry.kind, data=entry.data,
            at=entry.at, request_hash=entry.request_hash, model_name=entry.model_name,
            model_provider=entry.model_provider, tokens_in=entry.tokens_in, tokens_out=entry.tokens_out,
            cost=entry.cost,
        )
        for offset, entry in enumerate(entries, start=1)
    ])
    tokens = sum(entry.tokens_in + entry.tokens_out for entry in entries)
    cost = sum((entry.cost for entry in entries), Decimal(0))
    steps = sum(entry.steps for entry in entries)
    if tokens or cost or steps:
        Run.objects.filter(pk=run.pk).update(
            tokens_used=F("tokens_used") + tokens, cost_used=F("cost_used") + cost, steps_used=F("steps_used") + steps,
        )
        run.tokens_used += tokens
        # Rounded like the column stores it, so the in-memory row reads as a fresh one would.
        run.cost_used = (run.cost_used + cost).quantize(COST_PLACES, rounding=ROUND_HALF_UP)
        run.steps_used += steps
    return rows


def find_replay(episode_id: int, request_hash: str, *, occurrence: int) -> JournalEntry | None:
    """The `occurrence`-th (1-based) model call with this request hash in this episode, or None.

    An episode may legitimately send the same request twice; counting
    occurrences keeps the second call from replaying the first reply.
    """
    if occurrence < 1:
        raise ValueError("occurrence counts from 1")
    entries = JournalEntry.objects.filter(
        episode_id=episode_id, request_hash=request_hash, kind=JournalKind.MODEL_CALL
    ).order_by("seq")
    matches = list(entries[occurrence - 1 : occurrence])
    return matches[0] if matches else None


def first_entry_at(episode_id: int) -> datetime | None:
    """When the episode's first entry was written (an earlier execution of it), or None: it never ran."""
    return JournalEntry.objects.filter(episode_id=episode_id).order_by("seq").values_list("at", flat=True).first()


def entries_for(run_id: int) -> QuerySet[JournalEntry]:
    """The run's journal in the order it was written."""
    return JournalEntry.objects.filter(run_id=run_id).order_by("seq")
