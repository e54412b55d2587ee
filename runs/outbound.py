"""Outbound tools (send_email, send_sms, send_slack, place_call): who, which key, then the ToolExecutor.

Inbound text can never widen who is contacted: the recipient is the run's
contact for `to_role`, and the model cannot name an address. The ToolExecutor
(runs.tool_executor) applies policy, the guardrail and the outbox; this module
turns its outcome into the tool result the model reads and the episode's
outcome (a held send, an escalation).
"""

from __future__ import annotations

from runs import outbox, tool_executor
from runs.context import EpisodeContext
from runs.models import Contact
from runs.tool_session import ToolSession, error

TOOL_CHANNEL = {"send_email": "email", "send_sms": "sms", "send_slack": "slack", "place_call": "voice"}
# The argument that carries the text a person reads (or the call brief), per tool.
TEXT_FIELDS = {"send_email": ("subject", "body"), "send_sms": ("body",), "send_slack": ("text",),
               "place_call": ("brief",)}


def send(ctx: EpisodeContext, args: dict, *, session: ToolSession, tool: str) -> dict:
    """Resolve the recipient from the run's contacts by role (never from the model) and hand over the send."""
    channel = TOOL_CHANNEL[tool]
    role = args["to_role"]
    contact = next((c for c in ctx.contacts if c.role == role), None)
    problem = _unreachable(ctx, channel=channel, role=role, contact=contact)
    if problem:
        return error(problem)
    recipient = outbox.normalize_recipient(channel, contact)
    ordinal = session.sends[(tool, recipient)]
    session.sends[(tool, recipient)] += 1
    outcome = tool_executor.execute(ctx, tool=tool, channel=channel, contact=contact, payload=_payload(tool, args),
                                    task_key=_task_for_role(ctx, role), ordinal=ordinal)
    if outcome.escalated:
        session.outcome.escalated = True
        session.stop = True
    if outcome.status == "sent":
        return {"ok": True, "status": "sent", "channel": channel, "to_role": role, "message_id": outcome.outbox_id}
    if outcome.status == "held":
        # Not the next contact: the ladder keeps its schedule and a flush episode sends this row (runs.decisions).
        current = session.outcome.held_until
        session.outcome.held_until = outcome.held_until if current is None else min(current, outcome.held_until)
        return {"ok": True, "status": "held", "channel": channel, "to_role": role, "message_id": outcome.outbox_id,
                "held_until": outcome.held_until.isoformat(), "message": outcome.message}
    if outcome.status == "awaiting_approval":
        return {"ok": True, "status": "awaiting_approval", "channel": channel, "to_role": role,
                "message_id": outcome.outbox_id, "message": outcome.message}
    extra: dict = {"status": outcome.status}
    if outcome.outbox_id is not None:
        extra["message_id"] = outcome.outbox_id
    return error(outcome.message or f"the {channel} message was not sent ({outcome.status})", **extra)


def _unreachable(ctx: EpisodeContext, *, channel: str, role: str, contact: Contact | None) -> str:
    if channel not in (ctx.plan.get("capabilities") or []):
        return f"this agent cannot use {channel}"
    if contact is None:
        return f"this run has no contact with role {role!r}"
    allowed = next((c.get("channels") for c in ctx.plan.get("contacts", []) if c.get("role") == role), None)
    if allowed is not None and channel not in allowed:
        return f"the {role} contact may not be reached by {channel}"
    if not outbox.normalize_recipient(channel, contact):
        return f"the {role} contact has no {channel} address"
    return ""


def _payload(tool: str, args: dict) -> dict:
    return {name: args[name] for name in TEXT_FIELDS[tool] if name in args}


def _task_for_role(ctx: EpisodeContext, role: str) -> str:
    """The task this send chases: the first open task of the role, else the role's first task."""
    pending = ctx.open_task_keys()
    keys = [t["key"] for t in ctx.plan.get("tasks", []) if t.get("contact_role") == role]
    return next((key for key in keys if key in pending), keys[0] if keys else "")
