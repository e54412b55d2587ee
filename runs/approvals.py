"""Approval mode: an outbound message waits as a draft until a human approves, edits or rejects it.

The plan's `approvals` ({outbound: none | first_message | all, channels: {<channel>: mode}}) says which
sends wait. The ToolExecutor writes such a send as an outbox row `awaiting_approval` (nothing sends it)
and `request` opens one `approval` escalation with the draft; the run sleeps on `human:approval`.

A human's answer (runs.answers; the options are registered below) closes the escalation, changes the row
and wakes the run in one transaction (the run row locked first, as everywhere): `approve` and `edit` make
the row pending, and the woken episode's flush sends it through the outbox under its first key, so a
draft goes out once however often it is approved; `reject` marks it rejected and the guidance reaches
the agent as a human answer. An edit is journaled with who made it; the plan's forbidden phrases and
the guardrail (its rules, and its model when configured) review the edited text first: a block refuses
the edit and leaves the draft waiting.
"""

from __future__ import annotations

from django.conf import settings

from runs import answer_options, clock, compliance, escalations, guardrails, journal, leases, outbox
from runs.answer_options import Answering, AnswerRefused
from runs.context import EpisodeContext
from runs.llm.base import ModelError
from runs.models import (
    Contact,
    Escalation,
    EscalationKind,
    EscalationStatus,
    JournalKind,
    OutboxMessage,
    OutboxStatus,
    Run,
)
from runs.send_outcomes import SendOutcome

MODES = ("none", "first_message", "all")
# The payload field a person reads, per tool: what an edit replaces (runs.outbound.TEXT_FIELDS names them all).
EDITED_FIELD = {"send_email": "body", "send_sms": "body", "send_slack": "text", "place_call": "brief"}
# Rows that show the contact was already written to by this run (first_message needs no approval after one).
DECIDED = (OutboxStatus.PENDING, OutboxStatus.SENDING, OutboxStatus.SENT, OutboxStatus.UNCERTAIN)


class EditRefused(AnswerRefused):
    """The guardrail blocks the edited text; the draft still waits (the API answers 400 with the reason)."""


def mode_for(plan: dict, *, channel: str) -> str:
    """The approval mode for sends on `channel`: the channel's own, else the agent's `outbound`."""
    approvals = plan.get("approvals") or {}
    mode = (approvals.get("channels") or {}).get(channel) or approvals.get("outbound") or "none"
    return mode if mode in MODES else "none"


def required(ctx: EpisodeContext, *, channel: str, contact: Contact) -> bool:
    """Whether a new send on `channel` to `contact` waits for a human."""
    mode = mode_for(ctx.plan, channel=channel)
    if mode == "all":
        return True
    if mode != "first_message":
        return False
    # "First" per contact, whatever the channel: any address of theirs this run already wrote to.
    addresses = {outbox.normalize_recipient(c, contact) for c in ("email", "sms", "slack", "voice")} - {""}
    return not OutboxMessage.objects.filter(run_id=ctx.run_id, recipient__in=addresses, status__in=DECIDED).exists()


def request(ctx: EpisodeContext, message: OutboxMessage) -> SendOutcome:
    """Ask for approval of a draft row (once: a re-executed episode finds the open escalation)."""
    with ctx.fence() as run:
        asked = Escalation.objects.filter(outbox_message=message, kind=EscalationKind.APPROVAL,
                                          status=EscalationStatus.OPEN).exists()
        if not asked:
            draft = _draft(message)
            escalations.open_escalation(
                run, kind=EscalationKind.APPROVAL, episode=ctx.episode, outbox_message=message,
                prompt=(f"Approve this {message.channel} message to {message.recipient} before it is sent: "
                        "approve it, edit it, or reject it with guidance for the agent."),
                context={"draft": draft, "outbox_message_id": message.pk, "task_key": message.task_key},
            )
    return SendOutcome("awaiting_approval", f"the {message.channel} message waits for a human's approval and "
                       "will be sent if approved; do not send it again", outbox_id=message.pk, escalated=True)


def rejected(message: OutboxMessage) -> SendOutcome:
    return SendOutcome("rejected", f"a human rejected this {message.channel} message; it was not sent. Follow "
                       "their guidance", outbox_id=message.pk)


def _approve(answering: Answering) -> dict:
    """Send the draft as it is (`text`: an optional note)."""
    escalation = answering.escalation
    _require_open_run(escalation)
    released = outbox.release_draft(escalation.outbox_message_id)
    _journal(answering, decision="approved", note=answering.text, released=released is not None)
    return {"answer": "approved", "approval": "approved", "outbox_message_id": escalation.outbox_message_id}


def _check_edit(escalation: Escalation, text: str, data: dict) -> None:
    """Before any lock: the plan's forbidden phrases and the guardrail on the edited text (AnswerRefused)."""
    if escalation.status != EscalationStatus.OPEN:  # before the guardrail spends a model call on it
        return  # answers.answer reports it closed under the lock
    message = OutboxMessage.objects.get(pk=escalation.outbox_message_id)
    run = Run.objects.select_related("organization").get(pk=escalation.run_id)
    payload = _edited_payload(run, message, text=text, subject=data.get("subject"))
    if phrases := compliance.forbidden_phrases(run.plan, payload=payload):
        raise EditRefused(f"the edited message contains forbidden phrases: {', '.join(map(repr, phrases))}")
    verdict = _review_edit(run, escalation, message, payload=payload)
    if not verdict.allowed:
        raise EditRefused(f"the guardrail blocks the edited message ({verdict.rule}): {verdict.reason}")


def _edit(answering: Answering) -> dict:
    """Send `text` instead of the draft's text (`data["subject"]` replaces an email's subject); the guardrail
    passed it in _check_edit."""
    escalation = answering.escalation
    _require_open_run(escalation)
    message = OutboxMessage.objects.get(pk=escalation.outbox_message_id)
    payload = _edited_payload(answering.run, message, text=answering.text, subject=answering.data.get("subject"))
    released = outbox.release_draft(message.pk, payload=payload)
    _journal(answering, decision="edited", original=message.payload, edited=payload, released=released is not None,
             guardrail={"allowed": True})
    return {"answer": "approved", "approval": "edited", "outbox_message_id": message.pk}


def _reject(answering: Answering) -> dict:
    """Never send the draft; `text` is guidance the agent reads on its next episode (never sent as written)."""
    escalation = answering.escalation
    discarded = outbox.discard_draft(escalation.outbox_message_id)
    _journal(answering, decision="rejected", guidance=answering.text, discarded=discarded is not None)
    return {"answer": answering.text, "approval": "rejected", "outbox_message_id": escalation.outbox_message_id}


def _is_draft(escalation: Escalation) -> bool:
    return escalation.outbox_message_id is not None


answer_options.register("approve", label="Approve and send", kinds=[EscalationKind.APPROVAL], act=_approve,
                        fits=_is_draft, description="Send the draft exactly as shown.")
answer_options.register("edit", label="Edit and send", kinds=[EscalationKind.APPROVAL], act=_edit, fits=_is_draft,
                        needs_text=True, check=_check_edit,
                        data={"subject": "optional: a new subject for an email"},
                        description="Send `text` instead of the draft's text; the guardrail reviews it first.")
answer_options.register("reject", label="Reject, with guidance for the agent", kinds=[EscalationKind.APPROVAL],
                        act=_reject, fits=_is_draft, needs_text=True,
                        description="Never send the draft; `text` is guidance the agent reads, never sent.")


def _require_open_run(escalation: Escalation) -> None:
    # Raised inside the answer's transaction, so the escalation stays open and nothing changes.
    if escalation.run is None or not escalation.run.is_open:
        raise AnswerRefused("the run has ended: nothing it drafted will be sent")


def _draft(message: OutboxMessage) -> dict:
    """What the human approves: recipient, channel and the exact text that would go out."""
    payload = message.payload
    return {"tool": message.tool, "channel": message.channel, "recipient": message.recipient,
            "subject": payload.get("subject") or "", "text": payload.get(EDITED_FIELD[message.tool], ""),
            "payload": payload}


def edit_preview(escalation: Escalation, text: str, data: dict) -> dict:
    """What `edit` would send: {"tool", "channel", "to", "payload"}, the plan's opt-out text included."""
    message = OutboxMessage.objects.get(pk=escalation.outbox_message_id)
    run = Run.objects.get(pk=escalation.run_id)
    return {"tool": message.tool, "channel": message.channel, "to": message.recipient,
            "payload": _edited_payload(run, message, text=text, subject=data.get("subject"))}


def _edited_payload(run: Run, message: OutboxMessage, *, text: str, subject: object) -> dict:
    payload = {**message.payload, EDITED_FIELD[message.tool]: text}
    if message.tool == "send_email" and isinstance(subject, str) and subject.strip():
        payload["subject"] = subject.strip()
    # The channel's required opt-out text stays, whatever the edit removed.
    return compliance.with_opt_out(run.plan, tool=message.tool, channel=message.channel, payload=payload)


def _review_edit(run: Run, escalation: Escalation, message: OutboxMessage, *, payload: dict) -> guardrails.Verdict:
    """The guardrail on the edited message: its rules, and its model when one is configured.

    The model's call is journaled and charged like an episode's, so it runs under the run's lease (the run
    waits for this human, so the lease is normally free); raises EditRefused when it cannot run now.
    """
    if not settings.LUCIA_GUARDRAIL_MODEL or escalation.episode is None:
        return guardrails.review_rules(_review_context(run, escalation, epoch=run.lease_epoch),
                                       channel=message.channel, payload=payload)
    owner = f"approval:{escalation.pk}"
    epoch = leases.claim(run.pk, owner=owner)
    if epoch is None:
        raise EditRefused("the run is busy right now; submit the edit again in a moment")
    try:
        return guardrails.review(_review_context(run, escalation, epoch=epoch, owner=owner), tool=message.tool,
                                 channel=message.channel, recipient=message.recipient, payload=payload)
    except ModelError as error:
        raise EditRefused(f"the guardrail could not review the edit now ({error}); submit it again") from None
    except leases.LeaseLost:
        # A worker took the run while the model judged the edit (the review outlasted its lease): its verdict is
        # not journaled, so it is not taken either.
        raise EditRefused("the run is busy right now; submit the edit again in a moment") from None
    finally:
        leases.release(run.pk, epoch=epoch, owner=owner)


def _review_context(run: Run, escalation: Escalation, *, epoch: int, owner: str | None = None) -> EpisodeContext:
    """A context for the guardrail: what the run trusts, as its episodes see it (the draft's episode)."""
    return EpisodeContext(run_id=run.pk, epoch=epoch, owner=owner, episode=escalation.episode, run=run, plan=run.plan,
                          contacts=list(run.contacts.all()), tasks=list(run.tasks.all()), now=clock.now(run))


def _journal(answering: Answering, *, decision: str, **details) -> None:
    """Journal the decision and who made it; the answer's transaction holds the run row."""
    escalation = answering.escalation
    actor = answering.actor
    data = {"decision": decision, "escalation_id": escalation.pk, "outbox_id": escalation.outbox_message_id,
            "via": actor["via"], "by_user": actor["user_id"],
            "by_username": getattr(answering.by_user, "username", "") or "", "by_key": actor["key_id"], **details}
    journal.write(answering.run, [journal.Entry(episode_id=escalation.episode_id, kind=JournalKind.APPROVAL,
                                                data=data, at=answering.at)])
