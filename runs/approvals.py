"""Approval mode: an outbound message waits as a draft until a human approves, edits or rejects it.

The plan's `approvals` ({outbound: none | first_message | all, channels: {<channel>: mode}}) says which
sends wait. The ToolExecutor writes such a send as an outbox row `awaiting_approval` (nothing sends it)
and `request` opens one `approval` escalation with the draft; the run sleeps on `human:approval`.

A human's answer closes the escalation, changes the row and wakes the run in one transaction (the run
row locked first, as everywhere): `approve` and `edit` make the row pending, and the woken episode's
flush sends it through the outbox under its first key, so a draft goes out once however often it is
approved; `reject` marks it rejected and the guidance reaches the agent as a human answer. An edit is
journaled with who made it; the plan's forbidden phrases and the guardrail (its rules, and its model
when configured) review the edited text first: a block refuses the edit and leaves the draft waiting.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from runs import clock, compliance, escalations, guardrails, journal, leases, outbox
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
# The options an approval offers (the answer registry's shape: name, label, the data it needs).
OPTIONS = [
    {"name": "approve", "label": "Approve and send", "data": {}},
    {"name": "edit", "label": "Edit and send", "data": {"text": "the message as it should be sent"}},
    {"name": "reject", "label": "Reject, with guidance for the agent", "data": {"text": "what the agent should do"}},
]
# The payload field a person reads, per tool: what an edit replaces (runs.outbound.TEXT_FIELDS names them all).
EDITED_FIELD = {"send_email": "body", "send_sms": "body", "send_slack": "text", "place_call": "brief"}
# Rows that show the contact was already written to by this run (first_message needs no approval after one).
DECIDED = (OutboxStatus.PENDING, OutboxStatus.SENDING, OutboxStatus.SENT, OutboxStatus.UNCERTAIN)


class EditRefused(ValueError):
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
                run, kind=EscalationKind.APPROVAL, episode=ctx.episode, outbox_message=message, options=OPTIONS,
                prompt=(f"Approve this {message.channel} message to {message.recipient} before it is sent: "
                        "approve it, edit it, or reject it with guidance for the agent."),
                context={"draft": draft, "outbox_message_id": message.pk, "task_key": message.task_key},
            )
    return SendOutcome("awaiting_approval", f"the {message.channel} message waits for a human's approval and "
                       "will be sent if approved; do not send it again", outbox_id=message.pk, escalated=True)


def rejected(message: OutboxMessage) -> SendOutcome:
    return SendOutcome("rejected", f"a human rejected this {message.channel} message; it was not sent. Follow "
                       "their guidance", outbox_id=message.pk)


def approve(escalation: Escalation, *, text: str = "", data: dict | None = None, by_user=None, by_key=None,
            via: str) -> Escalation:
    """Send the draft as it is. `text` is an optional note. Raises EscalationClosed when already answered,
    ValueError when the run has ended."""
    _require_approval(escalation)
    with transaction.atomic():
        locked = escalations.close(escalation, status=EscalationStatus.ANSWERED, answer=text.strip() or "approved",
                                   by_user=by_user, by_key=by_key, via=via)
        _require_open_run(locked)
        released = outbox.release_draft(locked.outbox_message_id)
        _journal(locked, decision="approved", outbox_id=locked.outbox_message_id, by_user=by_user, by_key=by_key,
                 via=via, note=text.strip(), released=released is not None)
        escalations.wake_run(locked, payload={"answer": "approved", "approval": "approved",
                                              "outbox_message_id": locked.outbox_message_id})
    return locked


def edit(escalation: Escalation, *, text: str, data: dict | None = None, by_user=None, by_key=None,
         via: str) -> Escalation:
    """Send `text` instead of the draft's text (`data["subject"]` replaces an email's subject).

    Raises EditRefused when the guardrail blocks the edited message, ValueError for an empty text,
    EscalationClosed when already answered.
    """
    _require_approval(escalation)
    if not text.strip():
        raise ValueError("an edit needs the message text as it should be sent")
    if escalation.status != EscalationStatus.OPEN:  # before the guardrail spends a model call on it
        raise escalations.EscalationClosed(f"escalation {escalation.pk} is already {escalation.status}")
    message = OutboxMessage.objects.get(pk=escalation.outbox_message_id)
    run = Run.objects.select_related("organization").get(pk=escalation.run_id)
    payload = _edited_payload(run, message, text=text, subject=(data or {}).get("subject"))
    if phrases := compliance.forbidden_phrases(run.plan, payload=payload):
        raise EditRefused(f"the edited message contains forbidden phrases: {', '.join(map(repr, phrases))}")
    verdict = _review_edit(run, escalation, message, payload=payload)
    if not verdict.allowed:
        raise EditRefused(f"the guardrail blocks the edited message ({verdict.rule}): {verdict.reason}")
    with transaction.atomic():
        locked = escalations.close(escalation, status=EscalationStatus.ANSWERED, answer=text,
                                   by_user=by_user, by_key=by_key, via=via)
        _require_open_run(locked)
        released = outbox.release_draft(message.pk, payload=payload)
        _journal(locked, decision="edited", outbox_id=message.pk, by_user=by_user, by_key=by_key, via=via,
                 original=message.payload, edited=payload, released=released is not None,
                 guardrail={"allowed": True, "model": verdict.model})
        escalations.wake_run(locked, payload={"answer": "approved", "approval": "edited",
                                              "outbox_message_id": message.pk})
    return locked


def reject(escalation: Escalation, *, text: str, data: dict | None = None, by_user=None, by_key=None,
           via: str) -> Escalation:
    """Never send the draft; `text` is guidance the agent reads on its next episode (never sent as written).

    Raises ValueError for empty guidance, EscalationClosed when already answered.
    """
    _require_approval(escalation)
    if not text.strip():
        raise ValueError("a rejection needs guidance for the agent")
    with transaction.atomic():
        locked = escalations.close(escalation, status=EscalationStatus.ANSWERED, answer=text.strip(),
                                   by_user=by_user, by_key=by_key, via=via)
        discarded = outbox.discard_draft(locked.outbox_message_id)
        _journal(locked, decision="rejected", outbox_id=locked.outbox_message_id, by_user=by_user, by_key=by_key,
                 via=via, guidance=text.strip(), discarded=discarded is not None)
        escalations.wake_run(locked, payload={"answer": text.strip(), "approval": "rejected",
                                              "outbox_message_id": locked.outbox_message_id})
    return locked


def answer(escalation: Escalation, *, option: str, text: str = "", data: dict | None = None, by_user=None,
           by_key=None, via: str) -> Escalation:
    """Dispatch an approval answer (`approve` | `edit` | `reject`) from the API or the Studio.

    A stand-in until the answers registry (runs.answers) registers these three options; raises ValueError
    for another option, and what the chosen function raises.
    """
    actions = {"approve": approve, "edit": edit, "reject": reject}
    if option not in actions:
        raise ValueError(f"answer a draft with one of {', '.join(actions)}, not {option!r}")
    return actions[option](escalation, text=text, data=data, by_user=by_user, by_key=by_key, via=via)


def _require_approval(escalation: Escalation) -> None:
    if escalation.kind != EscalationKind.APPROVAL or escalation.outbox_message_id is None:
        raise ValueError(f"escalation {escalation.pk} is a {escalation.kind}, not a draft awaiting approval")


def _require_open_run(escalation: Escalation) -> None:
    # Raised inside the closing transaction, so the escalation stays open and nothing changes.
    if escalation.run is None or not escalation.run.is_open:
        raise ValueError("the run has ended: nothing it drafted will be sent")


def _draft(message: OutboxMessage) -> dict:
    """What the human approves: recipient, channel and the exact text that would go out."""
    payload = message.payload
    return {"tool": message.tool, "channel": message.channel, "recipient": message.recipient,
            "subject": payload.get("subject") or "", "text": payload.get(EDITED_FIELD[message.tool], ""),
            "payload": payload}


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
    epoch = leases.claim(run.pk, owner=f"approval:{escalation.pk}")
    if epoch is None:
        raise EditRefused("the run is busy right now; submit the edit again in a moment")
    try:
        return guardrails.review(_review_context(run, escalation, epoch=epoch), tool=message.tool,
                                 channel=message.channel, recipient=message.recipient, payload=payload)
    except ModelError as error:
        raise EditRefused(f"the guardrail could not review the edit now ({error}); submit it again") from None
    finally:
        leases.release(run.pk, epoch=epoch)


def _review_context(run: Run, escalation: Escalation, *, epoch: int) -> EpisodeContext:
    """A context for the guardrail: what the run trusts, as its episodes see it (the draft's episode)."""
    return EpisodeContext(run_id=run.pk, epoch=epoch, episode=escalation.episode, run=run, plan=run.plan,
                          contacts=list(run.contacts.all()), tasks=list(run.tasks.all()), now=clock.now(run))


def _journal(escalation: Escalation, *, decision: str, outbox_id: int | None, by_user, by_key, via: str,
             **details) -> None:
    """Journal the decision and who made it; the caller's transaction holds the run row (escalations.close)."""
    run = escalation.run
    data = {"decision": decision, "escalation_id": escalation.pk, "outbox_id": outbox_id, "via": via,
            "by_user": getattr(by_user, "pk", None), "by_username": getattr(by_user, "username", "") or "",
            "by_key": getattr(by_key, "pk", None), **details}
    journal.write(run, [journal.Entry(episode_id=escalation.episode_id, kind=JournalKind.APPROVAL, data=data,
                                      at=clock.now(run))])
