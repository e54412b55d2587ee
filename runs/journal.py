"""The journal: the append-only record of what a run did, and the store model calls are replayed from.

The only module that writes JournalEntry. Every append is fenced by the run's
lease (runs.leases.fence), so a worker that lost its lease records nothing, and
the fence's row lock serialises a run's writers, which makes `max(seq) + 1` safe.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import F, Max, QuerySet

from runs import leases
from runs.models import JournalEntry, JournalKind, Run


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
    """Record one entry and charge its usage to the run, in one fenced transaction.

    `steps` is the number of budgeted steps the entry stands for (1 for a paid
    model call); tokens, cost and steps land in the run's usage counters in the
    same transaction, so usage and journal never disagree. Raises LeaseLost.
    """
    if kind not in JournalKind.values:
        raise ValueError(f"unknown journal kind {kind!r}")
    with leases.fence(run_id, epoch=epoch):
        last = JournalEntry.objects.filter(run_id=run_id).aggregate(last=Max("seq"))["last"] or 0
        entry = JournalEntry.objects.create(
            run_id=run_id,
            episode_id=episode_id,
            seq=last + 1,
            kind=kind,
            data=data,
            at=at,
            request_hash=request_hash,
            model_name=model_name,
            model_provider=model_provider,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost=cost,
        )
        if tokens_in or tokens_out or cost or steps:
            Run.objects.filter(pk=run_id).update(
                tokens_used=F("tokens_used") + tokens_in + tokens_out,
                cost_used=F("cost_used") + cost,
                steps_used=F("steps_used") + steps,
            )
    return entry


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
