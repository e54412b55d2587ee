"""Sends a human decided (answers send_anyway and reply_to_contact), made by the episode their answer wakes.

No model call: the episode's payload names the exact message. It goes
through the outbox by the episode's own key, so a re-executed episode finds
its row and never sends twice. A human's decision replaces the guardrail
review (send_anyway is the override of one; reply_to_contact is the human's
own words), never a suppression: an opted-out address is not written to.
"""

from __future__ import annotations

from runs import episode_records, outbox, tool_executor
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Contact, EpisodeKind, JournalKind
from runs.send_outcomes import SendOutcome

FLAG = "human_send"


def is_human_send(ctx: EpisodeContext) -> bool:
    return ctx.episode.kind == EpisodeKind.HUMAN_ANSWER and isinstance((ctx.episode.payload or {}).get(FLAG), dict)


def run(ctx: EpisodeContext) -> EpisodeOutcome:
    """Send the message the answer names, once; the outcome is journaled like a tool result."""
    spec = ctx.episode.payload[FLAG]
    outcome = EpisodeOutcome()
    contact = _contact(ctx, spec)
    if contact is None:
        episode_records.record(ctx, JournalKind.NOTE, {"runtime": True, "human_send": spec.get("tool"),
                                             "text": "the contact is no longer on the run: nothing sent"})
        return outcome
    sent = _send(ctx, spec, contact=contact)
    episode_records.record(ctx, JournalKind.TOOL_RESULT, {"name": spec["tool"], "human_send": True,
                                                "override": bool(spec.get("override")),
                                                "escalation_id": ctx.episode.payload.get("escalation_id"),
                                                "result": {"status": sent.status, "detail": sent.message}})
    return outcome


def _contact(ctx: EpisodeContext, spec: dict) -> Contact | None:
    if spec.get("role"):
        return next((c for c in ctx.contacts if c.role == spec["role"]), None)
    return next((c for c in ctx.contacts
                 if outbox.normalize_recipient(spec["channel"], c) == spec.get("recipient")), None)


def _send(ctx: EpisodeContext, spec: dict, *, contact: Contact) -> SendOutcome:
    recipient = outbox.normalize_recipient(spec["channel"], contact)
    key = outbox.idem_key(run_id=ctx.run_id, episode_id=ctx.episode.pk, task_key="human", tool=spec["tool"],
                          recipient=recipient, ordinal=0)
    message = outbox.open_row(
        ctx, key=key, tool=spec["tool"], channel=spec["channel"], recipient=recipient, task_key="human",
        ordinal=0, payload=spec["payload"], human_override=bool(spec.get("override")))
    return tool_executor.deliver(ctx, message)
