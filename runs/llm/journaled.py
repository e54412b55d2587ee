"""Durable model calls: replay a journaled reply, or call the provider (bounded retries) and journal it.

DESIGN principle 6: a re-executed episode replays recorded responses instead of
paying again. The replay key is (episode, request hash, occurrence): the loop
counts how many times it has sent the same request in the episode.

The provider is called outside any transaction (no row lock across the
network); only the journal write is fenced. A failed call journals nothing and,
past the retry bound, raises ModelError for the loop to escalate: a model
failure never produces a send.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from runs import journal, leases
from runs.lease_renewals import Heartbeat
from runs.llm.base import ChatRequest, ModelError, ModelProvider, ModelReply
from runs.models import JournalKind, Run

logger = logging.getLogger(__name__)

# Waits between attempts; their count + 1 is the number of attempts.
BACKOFF_S: tuple[float, ...] = (0.5, 2.0)
# A provider's Retry-After is honoured up to this, so one call cannot hold a lease for minutes.
MAX_WAIT_S = 10.0
# How much of the newest message the journal keeps in the request summary.
SUMMARY_CHARS = 2000


def call_model(
    *,
    run_id: int,
    epoch: int,
    episode_id: int,
    provider: ModelProvider,
    request: ChatRequest,
    at: datetime,
    occurrence: int,
    owner: str | None = None,
    heartbeat: Heartbeat | None = None,
    sleep: Callable[[float], None] | None = None,
    backoff: Sequence[float] = BACKOFF_S,
    replay: bool = True,
) -> ModelReply:
    """The model's reply to `request`: replayed from the journal when recorded, else called and journaled.

    Raises ModelError when every attempt failed (or one failed for good), and
    LeaseLost when the lease went away; in both cases nothing is journaled.
    """
    reply, entry = answer(episode_id=episode_id, provider=provider, request=request, at=at, occurrence=occurrence,
                          heartbeat=heartbeat, sleep=sleep, backoff=backoff, replay=replay)
    if entry is not None:
        with leases.fence(run_id, epoch=epoch, owner=owner) as run:
            journal.write(run, [entry])
    return reply


def answer(
    *,
    episode_id: int,
    provider: ModelProvider,
    request: ChatRequest,
    at: datetime,
    occurrence: int,
    heartbeat: Heartbeat | None = None,
    sleep: Callable[[float], None] | None = None,
    backoff: Sequence[float] = BACKOFF_S,
    replay: bool = True,
) -> tuple[ModelReply, journal.Entry | None]:
    """The reply, and for a new (paid) one the journal entry to write, fenced, before anything acts on it.

    `replay=False` skips the journal lookup: for an episode with no journal
    entries yet, nothing can be replayed (and `occurrence` is not read). Raises like `call_model`.
    """
    # Hashed for the lookup, else only for a reply to journal: a call that fails (a model outage) never needs it.
    entry = journal.find_replay(episode_id, request.request_hash(), occurrence=occurrence) if replay else None
    if entry is not None:
        return ModelReply.from_data(
            entry.data.get("reply", {}), tokens_in=entry.tokens_in, tokens_out=entry.tokens_out, cost=entry.cost,
            model_name=entry.model_name, provider=entry.model_provider, replayed=True,
        ), None
    reply = _complete(provider, request, sleep=sleep, backoff=backoff, heartbeat=heartbeat)
    if heartbeat is not None:
        heartbeat.check()
    return reply, journal.Entry(
        episode_id=episode_id,
        kind=JournalKind.MODEL_CALL,
        data={"request": _summary(request), "reply": reply.as_data(), "usage": reply.raw.get("usage")},
        at=at,
        request_hash=request.request_hash(),
        model_name=reply.model_name,
        model_provider=reply.provider,
        tokens_in=reply.tokens_in,
        tokens_out=reply.tokens_out,
        cost=reply.cost,
        steps=1,
    )


def check_budget(run: Run) -> str | None:
    """Why the run may not make another model call (steps, tokens or cost spent), or None when it may."""
    if run.steps_used >= run.step_budget:
        return f"step budget spent ({run.steps_used} of {run.step_budget} steps)"
    if run.tokens_used >= run.token_budget:
        return f"token budget spent ({run.tokens_used} of {run.token_budget} tokens)"
    if run.cost_used >= run.cost_budget:
        return f"cost budget spent (${run.cost_used} of ${run.cost_budget})"
    return None


def _complete(
    provider: ModelProvider,
    request: ChatRequest,
    *,
    sleep: Callable[[float], None] | None,
    backoff: Sequence[float],
    heartbeat: Heartbeat | None,
) -> ModelReply:
    # Looked up per call, not bound at import: a test that forbids wall-clock waits patches time.sleep.
    sleep = time.sleep if sleep is None else sleep
    attempts = len(backoff) + 1
    for attempt in range(1, attempts + 1):
        if heartbeat is not None:
            heartbeat.check()  # no point paying for a reply this worker may not record
        try:
            return provider.complete(request)
        except ModelError as error:
            if not error.retryable or attempt == attempts:
                raise ModelError(
                    f"{error.message} (attempt {attempt} of {attempts})", retryable=error.retryable
                ) from error
            wait = min(max(backoff[attempt - 1], error.retry_after or 0.0), MAX_WAIT_S)
            logger.warning("model call failed (attempt %s of %s), retrying in %.1fs: %s",
                           attempt, attempts, wait, error.message)
            sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _summary(request: ChatRequest) -> dict:
    """Enough of the request to read the timeline; the full conversation is rebuilt from the run's state."""
    last = request.messages[-1] if request.messages else {}
    content = last.get("content")
    return {
        "model": request.model,
        "temperature": request.temperature,
        "messages": len(request.messages),
        "last_message": {
            "role": last.get("role"),
            "content": content[:SUMMARY_CHARS] if isinstance(content, str) else content,
        },
        "tools": request.tool_names(),
        "event": request.metadata.get("event"),
    }
