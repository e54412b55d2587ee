"""Outbound tools (send_email, send_sms, send_slack, place_call): who, whether now, then the hand-off.

Inbound text can never widen who is contacted: the recipient is the run's
contact for `to_role`, and the model cannot name an address. Deterministic
policy runs before anything is recorded: forbidden phrases (blocked, a human
reviews), suppressed addresses, and the send window (deferred, not dropped).
The send itself goes through runs.sandbox_sends until the ToolExecutor lands.
"""

from __future__ import annotations

from connectors.models import Suppression
from runs import policy, sandbox_sends
from runs.context import EpisodeContext
from runs.models import Contact, EscalationKind, JournalKind, OutboxMessage, OutboxStatus
from runs.tools import ToolSession, error, escalate, open_tasks, record

TOOL_CHANNEL = {"send_email": "email", "send_sms": "sms", "send_slack": "slack", "place_call": "voice"}
# The argument that carries the text a person reads (or the call brief), per tool.
TEXT_FIELDS = {"send_email": ("subject", "body"), "send_sms": ("body",), "send_slack": ("text",),
               "place_call": ("brief",)}
OPT_OUT_FIELD = {"send_email": "body", "send_sms": "body", "send_slack": "text"}


def send(ctx: EpisodeContext, args: dict, *, session: ToolSession, tool: str) -> dict:
    """Resolve the recipient from the run's contacts by role (never from the model), pre-check policy, send."""
    channel = TOOL_CHANNEL[tool]
    role = args["to_role"]
    contact = next((c for c in ctx.contacts if c.role == role), None)
    problem = _unreachable(ctx, channel=channel, role=role, contact=contact)
    if problem:
        return error(problem)
    recipient = sandbox_sends.normalize_recipient(channel, contact)
    payload = _payload(ctx, tool=tool, args=args)
    task_key = _task_for_role(ctx, role)
    ordinal = session.sends[(tool, recipient)]
    key = sandbox_sends.idem_key(run_id=ctx.run_id, episode_id=ctx.episode.pk, task_key=task_key, tool=tool,
                                 recipient=recipient, ordinal=ordinal)
    # A send an earlier attempt of this episode already recorded is adopted whatever the checks say now.
    if not OutboxMessage.objects.filter(idem_key=key).exists():
        blocked = _policy_block(ctx, session, tool=tool, channel=channel, recipient=recipient, contact=contact,
                                payload=payload)
        if blocked is not None:
            return blocked
    session.sends[(tool, recipient)] += 1
    sent = sandbox_sends.send(ctx, tool=tool, channel=channel, contact=contact, payload=payload, task_key=task_key,
                              ordinal=ordinal)
    if sent.status != OutboxStatus.SENT:
        return error(f"the {channel} message was not sent ({sent.status})", message_id=sent.outbox_id)
    return {"ok": True, "status": "sent", "channel": channel, "to_role": role, "message_id": sent.outbox_id}


def _unreachable(ctx: EpisodeContext, *, channel: str, role: str, contact: Contact | None) -> str:
    if channel not in (ctx.plan.get("capabilities") or []):
        return f"this agent cannot use {channel}"
    if contact is None:
        return f"this run has no contact with role {role!r}"
    allowed = next((c.get("channels") for c in ctx.plan.get("contacts", []) if c.get("role") == role), None)
    if allowed is not None and channel not in allowed:
        return f"the {role} contact may not be reached by {channel}"
    if not sandbox_sends.normalize_recipient(channel, contact):
        return f"the {role} contact has no {channel} address"
    return ""


def _payload(ctx: EpisodeContext, *, tool: str, args: dict) -> dict:
    payload = {name: args[name] for name in TEXT_FIELDS[tool] if name in args}
    opt_out = ((ctx.plan.get("compliance") or {}).get("opt_out_text") or {}).get(TOOL_CHANNEL[tool])
    field_name = OPT_OUT_FIELD.get(tool)
    # Required opt-out text is the runtime's to add, so the model cannot forget it.
    if opt_out and field_name and opt_out.casefold() not in payload.get(field_name, "").casefold():
        payload[field_name] = f"{payload.get(field_name, '').rstrip()}\n\n{opt_out}"
    return payload


def _task_for_role(ctx: EpisodeContext, role: str) -> str:
    """The task this send chases: the first open task of the role, else the role's first task."""
    pending = open_tasks(ctx)
    keys = [t["key"] for t in ctx.plan.get("tasks", []) if t.get("contact_role") == role]
    return next((key for key in keys if key in pending), keys[0] if keys else "")


def _policy_block(ctx: EpisodeContext, session: ToolSession, *, tool: str, channel: str, recipient: str,
                  contact: Contact, payload: dict) -> dict | None:
    """A result for the model when deterministic policy stops this send now, else None."""
    text = "\n".join(str(payload.get(name, "")) for name in TEXT_FIELDS[tool]).casefold()
    phrases = [p for p in (ctx.plan.get("compliance") or {}).get("forbidden_phrases") or [] if p.casefold() in text]
    if phrases:
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "forbidden_phrases", "phrases": phrases})
        escalate(ctx, kind=EscalationKind.GUARDRAIL_BLOCK, options=["send it anyway", "do not send"],
                 prompt=f"A {channel} message was blocked: it contains {', '.join(map(repr, phrases))}.",
                 context={"tool": tool, "recipient": recipient, "payload": payload, "phrases": phrases})
        session.outcome.escalated = True
        session.stop = True
        return error("blocked: the message contains forbidden phrases; a human will review it", status="blocked")
    if Suppression.objects.filter(organization_id=ctx.run.organization_id, channel=channel, address=recipient).exists():
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "suppressed", "recipient": recipient})
        return error(f"blocked: the {channel} address opted out or bounced; do not contact it", status="blocked")
    deferred = policy.check_send_window(ctx.plan, contact_tz=contact.timezone,
                                        org_tz=ctx.run.organization.default_timezone, now=ctx.now, run_id=ctx.run_id)
    if deferred is not None:
        record(ctx, JournalKind.POLICY_BLOCK,
               {"tool": tool, "rule": "send_window", "deferred_until": deferred.isoformat()})
        current = session.outcome.followup_override
        session.outcome.followup_override = deferred if current is None else min(current, deferred)
        return error(f"deferred until {deferred.isoformat()}: outside the contact's send window", status="deferred",
                     deferred_until=deferred.isoformat())
    return None
