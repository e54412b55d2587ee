"""The journal: the append-only record of what a run did, and the store model calls are replayed from.

The only module that writes JournalEntry. Every write is fenced by the run's
lease (runs.leases.fence), so a worker that lost its lease records nothing, and
the fence's row lock serialises a run's writers. Seqs are handed out by the run
row's `journal_seq`, moved on in the statement that locks it: an episode's
entries ride on its fence's own statement (`rider`), other writers (a human's
answer) update the counter and insert (`write`). No seq lookup either way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from runs import leases
from runs.models import JournalEntry, JournalKind, Run

# The entries of a fence's rider, numbered after the run's last seq (the fenced row's journal_seq already counts
# them). Params: j_entries, the entries as one JSON array in order (one parameter, whatever their number: the
# statement's text never changes, and no array of values is escaped one element at a time), j_count, j_created.
RIDER_SQL = """,
journal_rows AS (
    INSERT INTO runs_journalentry (run_id, episode_id, seq, kind, data, request_hash, model_name, model_provider,
                                   tokens_in, tokens_out, cost, at, created_at)
    SELECT fenced.id, (e.entry ->> 'episode_id')::bigint, fenced.journal_seq - %(j_count)s + e.ord,
           e.entry ->> 'kind', e.entry -> 'data', e.entry ->> 'request_hash', e.entry ->> 'model_name',
           e.entry ->> 'model_provider', (e.entry ->> 'tokens_in')::integer, (e.entry ->> 'tokens_out')::integer,
           (e.entry ->> 'cost')::numeric, (e.entry ->> 'at')::timestamptz, %(j_created)s
      FROM fenced, jsonb_array_elements(%(j_entries)s::jsonb) WITH ORDINALITY AS e(entry, ord)
)"""

# JournalKind.values builds its list on every read; an episode makes a dozen entries.
_KINDS = frozenset(JournalKind.values)


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
        if self.kind not in _KINDS:
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


def rider(entries: Sequence[Entry]) -> leases.Rider:
    """`entries` as rows the fence's own statement writes (runs.leases.fence), with their usage: the fenced row's
    journal_seq, moved on by their number, is the last seq they take."""
    if not entries:
        return leases.Rider()
    rows = [{"episode_id": entry.episode_id, "kind": entry.kind, "data": entry.data,
             "request_hash": entry.request_hash, "model_name": entry.model_name,
             "model_provider": entry.model_provider, "tokens_in": entry.tokens_in, "tokens_out": entry.tokens_out,
             "cost": str(entry.cost), "at": entry.at.isoformat()} for entry in entries]
    params = {"j_entries": json.dumps(rows), "j_count": len(entries), "j_created": timezone.now()}
    return leases.Rider(sql=RIDER_SQL, params=params, journal_entries=len(entries),
                        tokens=sum(entry.tokens_in + entry.tokens_out for entry in entries),
                        cost=sum((entry.cost for entry in entries), Decimal(0)),
                        steps=sum(entry.steps for entry in entries))


def write(run: Run, entries: Sequence[Entry]) -> list[JournalEntry]:
    """Record `entries` in order and charge their usage to the run; call under the run's fence with its locked row.

    Tokens, cost and steps land in the run's usage counters in the same
    transaction, so usage and journal never disagree; `run`'s counters are
    brought up to date too (the lock makes them exact). The run row's journal_seq hands out the seqs.
    A fence can write entries in its own statement instead (`rider`).
    """
    if not entries:
        return []
    charge = rider(entries)
    with connection.cursor() as cursor:
        cursor.execute(
            """UPDATE runs_run SET journal_seq = journal_seq + %s, tokens_used = tokens_used + %s,
                      cost_used = cost_used + %s, steps_used = steps_used + %s
                WHERE id = %s RETURNING journal_seq, tokens_used, cost_used, steps_used""",
            [len(entries), charge.tokens, charge.cost, charge.steps, run.pk],
        )
        last, run.tokens_used, run.cost_used, run.steps_used = cursor.fetchone()
    first = last - len(entries)
    return JournalEntry.objects.bulk_create([
        JournalEntry(
            run_id=run.pk, episode_id=entry.episode_id, seq=first + offset, kind=entry.kind, data=entry.data,
            at=entry.at, request_hash=entry.request_hash, model_name=entry.model_name,
            model_provider=entry.model_provider, tokens_in=entry.tokens_in, tokens_out=entry.tokens_out,
            cost=entry.cost,
        )
        for offset, entry in enumerate(entries, start=1)
    ])


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


def entries_for(run_id: int) -> QuerySet[JournalEntry]:
    """The run's journal in the order it was written."""
    return JournalEntry.objects.filter(run_id=run_id).order_by("seq")
