"""The agent loop: model ↔ tools for one episode, journaled, budgeted, bounded.

Each turn checks the lease and the budget, asks the model (replayed from the
journal when this episode already asked the same thing), and runs its tool
calls. It stops when the model calls no tool, calls `finish` or `ask_human`,
a guardrail blocks, or `model.max_steps_per_episode` is reached. No row lock
is held across a model call: every write is its own short fenced transaction.

Spent budgets and model failures that retrying cannot fix open one `stuck`
escalation and end the episode with nothing sent. A model that is down
(a retryable failure) raises ModelUnavailable: the worker postpones the
episode (runs.model_outages). LeaseLost propagates.
"""

from __future__ import annotations

import logging
from collections import Counter

from runs import (
    absences,
    contact_memory,
    episode_records,
    evidence,
    model_outages,
    plan_cache,
    promises,
    prompts,
    tool_executor,
    tools,
)
from runs.context import EpisodeContext, EpisodeOutcome
from runs.llm import journaled, providers
from runs.llm.base import ChatRequest, ModelError, ModelReply, canonical_json, frozen, function_tools
from runs.models import EscalationKind, JournalKind
from runs.tool_session import ToolSession

logger = logging.getLogger(__name__)

DEFAULT_MAX_STEPS = 6


def run_episode(ctx: EpisodeContext, *, flush: bool = True) -> EpisodeOutcome:
    """Run the loop; with `flush=False` the last journal entries stay in ctx.pending for the caller's fence."""
    session = ToolSession()
    # Sends a human confirmed were not sent (or a transient refusal left pending) go out first, by their own key.
    tool_executor.flush_pending(ctx)
    # "Email me instead": the contact's own words move their follow-ups, before the model answers them.
    contact_memory.learn_from_reply(ctx)
    # A contact who writes back while recorded as away is back (runs.absences).
    absences.learn_return(ctx)
    # A promise whose date and grace passed with its task open is broken before the model writes (runs.promises).
    promises.review(ctx)
    model = ctx.plan.get("model") or {}
    started = ctx.facts.first_entry_at
    # An episode that never journaled anything has nothing to replay: its model calls skip the lookup.
    replay = started is not None
    facts = prompts.metadata(ctx, now=started or ctx.now)
    messages = prompts.messages(ctx, facts)
    provider = providers.provider_for_run(ctx.plan, run_id=ctx.run_id, at=ctx.now)
    model_name = providers.model_name(ctx.plan)
    plan_tools = plan_cache.derived(ctx.plan, "function_tools", _function_tools)
    temperature = float(model.get("temperature", 0.2))
    occurrences: Counter[str] = Counter()
    for _ in range(int(model.get("max_steps_per_episode") or DEFAULT_MAX_STEPS)):
        _check_lease(ctx)
        spent = journaled.check_budget(ctx.usage())
        if spent:
            _stuck(ctx, session, f"The run's budget is spent: {spent}.", reason="budget")
            break
        request = ChatRequest(model=model_name, messages=list(messages), tools=plan_tools, temperature=temperature,
                              metadata=facts)
        reply = _ask(ctx, session, provider, request, occurrences, replay=replay)
        if reply is None:
            break
        messages.append(reply.assistant_message())
        if not reply.tool_calls or _run_tools(ctx, session, reply, messages):
            break
    else:
        episode_records.record(ctx, JournalKind.NOTE,
                               {"text": "episode reached model.max_steps_per_episode", "runtime": True})
    settle_tasks(ctx)
    if flush:
        ctx.flush()
    return session.outcome


def _function_tools(plan: dict) -> list[dict]:
    # The same in every request of the plan: encoded once for the request hash (runs.llm.base.frozen).
    return frozen(function_tools(plan.get("tools") or []))


def _check_lease(ctx: EpisodeContext) -> None:
    if ctx.heartbeat is not None:
        ctx.heartbeat.check()


def _ask(ctx: EpisodeContext, session: ToolSession, provider, request: ChatRequest,
         occurrences: Counter, *, replay: bool) -> ModelReply | None:
    """The model's reply, or None after a failure retrying cannot fix (escalated: a model failure never sends).

    A retryable failure (429, 5xx, timeout) raises ModelUnavailable at once: the episode is retried after a
    backoff of minutes to hours (runs.model_outages), not within seconds in this process.

    A new reply's journal entry joins ctx.pending: it is written, fenced, with
    the tool call it asks for, before the tool acts (runs.context).
    """
    occurrence = 0
    if replay:
        # The replay key's count. An episode that replays nothing needs none: it hashes only a reply to journal.
        occurrence = occurrences[request.request_hash()] + 1
        occurrences[request.request_hash()] = occurrence
    try:
        reply, entry = journaled.answer(
            episode_id=ctx.episode.pk, provider=provider, request=request, at=ctx.now,
            occurrence=occurrence, heartbeat=ctx.heartbeat, replay=replay, backoff=(),
        )
    except ModelError as failure:
        if failure.retryable:
            raise model_outages.ModelUnavailable(failure) from failure
        logger.warning("run %s: model failed in episode #%s: %s", ctx.run_id, ctx.episode.seq, failure.message)
        _stuck(ctx, session, f"The model failed: {failure.message}", reason="model_error")
        return None
    if entry is not None:
        ctx.pending.append(entry)
    return reply


def _run_tools(ctx: EpisodeContext, session: ToolSession, reply: ModelReply, messages: list[dict]) -> bool:
    """Run the reply's tool calls in order; True when the loop must stop."""
    for call in reply.tool_calls:
        result = tools.dispatch(ctx, call, session=session, flush=False)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": canonical_json(result)})
        if session.stop:
            return True
    return False


def _stuck(ctx: EpisodeContext, session: ToolSession, prompt: str, *, reason: str) -> None:
    episode_records.escalate(ctx, kind=EscalationKind.STUCK, prompt=prompt,
                   context={"reason": reason, "episode_seq": ctx.episode.seq})
    session.outcome.escalated = True
    session.stop = True


def settle_tasks(ctx: EpisodeContext) -> None:
    """Mark done every open task whose done_when passes on the evidence: the runtime decides, not the model."""
    open_keys = tools.open_tasks(ctx)
    specs = [spec for spec in ctx.plan.get("tasks") or []
             if spec["key"] in open_keys and (spec.get("done_when") or {}).get("type")]
    if not specs:
        return
    held = evidence.gather(ctx.run_id, current=ctx.episode, checks={spec["done_when"]["type"] for spec in specs},
                           episodes=ctx.facts.messages, contacts=ctx.contacts)
    for spec in specs:
        tools.settle_task(ctx, spec, evidence_ref="runtime", held=held)

