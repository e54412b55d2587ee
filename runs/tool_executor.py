"""The ToolExecutor: every outbound side effect goes policy → guardrail → outbox row → provider → record.

DESIGN principle 4. The idempotency key comes from runtime state; a
re-executed episode finds its row and recovers instead of sending again:
`sent` adopts; `pending` sends; `sending` (a crash after the call began, or
an attempt whose outcome is unknown) asks the connector whether the key
went out once its settle window has passed: found adopts, "not sent" sends,
"cannot say" marks the row `uncertain` and asks a human (never a second
send). With approval mode on (runs.approvals) a new send is written as a
draft, `awaiting_approval`, and waits for a human; an approved one is sent
by the next flush. Provider faults are classified in runs.provider_faults. The provider
call runs outside any transaction: the row goes to `sending` in one fenced
write and to `sent` in another.

A simulated run never reaches a real provider: whatever identities its
organization has, it sends through the sandbox connector.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from django.conf import settings

from connectors import message_ids, registry
from connectors.base import Connector, ConnectorError, OutboundMessage
from connectors.models import Channel, Identity
from runs import (
    approvals,
    clock,
    compliance,
    faults,
    guardrails,
    leases,
    outbox,
    policy,
    provider_faults,
    send_outcomes,
)
from runs.context import EpisodeContext
from runs.episode_records import escalate, record
from runs.models import Contact, Episode, EpisodeKind, EscalationKind, JournalKind, OutboxMessage, OutboxStatus
from runs.send_outcomes import SendOutcome

logger = logging.getLogger(__name__)

# How many of the run's latest inbound messages on a channel are searched for one to thread on.
THREAD_LOOKBACK = 20
# How long after the episode's last fenced write a provider call needs no other confirmation of the lease
# (_confirm_lease): far below half a lease, and above the few instructions between that write and the call.
FENCE_CONFIRMS_S = 0.05


def execute(ctx: EpisodeContext, *, tool: str, channel: str, contact: Contact, payload: dict, task_key: str,
            ordinal: int, checked_again: bool = False) -> SendOutcome:
    """Send once per key. Raises ModelError (guardrail model), LeaseLost; provider faults are outcomes (held).

    The checks read the episode's facts (runs.episode_facts, read when it started); the row's own statement
    checks suppression and a human's takeover again, and when either arrived since, the facts are read again
    and the checks run once more (`checked_again`), so the block is journaled as any other.
    """
    recipient = outbox.normalize_recipient(channel, contact)
    key = outbox.idem_key(run_id=ctx.run_id, episode_id=ctx.episode.pk, task_key=task_key, tool=tool,
                          recipient=recipient, ordinal=ordinal)
    message = ctx.facts.outbox_by_key.get(key)
    if message is None:
        # Checks apply to new sends only: a row an earlier attempt wrote was decided then and is recovered as is.
        payload = compliance.with_opt_out(ctx.plan, tool=tool, channel=channel, payload=payload)
        hold = compliance.check(ctx, tool=tool, channel=channel, recipient=recipient, contact=contact,
                                payload=payload)
        if hold is not None and hold.deferred_until is None:
            return SendOutcome(hold.status, hold.message, escalated=hold.escalated)
        blocked = _guardrail(ctx, tool=tool, channel=channel, recipient=recipient, payload=payload)
        if blocked is not None:
            return blocked
        connector = connector_for(ctx, channel)
        if connector is None:
            return _unavailable(ctx, tool=tool, channel=channel)
        awaiting = approvals.required(ctx, channel=channel, contact=contact)
        # Nothing holds it: the row is written as an attempt that has begun, and the provider is called right after
        # that one write. A real run with caps writes it under the address's lock, after counting the caps again.
        at_once = hold is None and not awaiting
        opening = dict(key=key, tool=tool, channel=channel, recipient=recipient, task_key=task_key, ordinal=ordinal,
                       payload=payload)
        # The provider call follows only a row written `sending`; the sandbox's is a row of this database.
        unflushed = at_once and connector.records_in_database
        if at_once and not ctx.run.sim and compliance.has_caps(ctx.plan):
            message = _open_within_caps(ctx, contact=contact, unflushed=unflushed, **opening)
            at_once = message is not None and message.status == OutboxStatus.SENDING
        else:
            message = outbox.open_row(ctx, **opening, not_before=hold.deferred_until if hold is not None else None,
                                      awaiting_approval=awaiting, sending=at_once, guarded=True, unflushed=unflushed)
        if message is None:
            if checked_again:
                return SendOutcome("blocked", "blocked: the recipient opted out or a human took the run over")
            ctx.loaded_facts = None
            return execute(ctx, tool=tool, channel=channel, contact=contact, payload=payload, task_key=task_key,
                           ordinal=ordinal, checked_again=True)
        if at_once and message.attempts == 1 and message.status == OutboxStatus.SENDING:
            return _call_provider(ctx, message, connector=connector, outbound=build_message(ctx, message))
    if message.status == OutboxStatus.AWAITING_APPROVAL:
        return approvals.request(ctx, message)
    if message.status == OutboxStatus.REJECTED:
        return approvals.rejected(message)
    if _still_held(ctx, message):
        return send_outcomes.held(message)
    return deliver(ctx, message)


def deliver(ctx: EpisodeContext, message: OutboxMessage) -> SendOutcome:
    """Bring one outbox row to a settled state, sending at most what is needed (the recovery table above)."""
    if message.status == OutboxStatus.SENT:
        return send_outcomes.sent(message, adopted=True)
    if message.status == OutboxStatus.FAILED:
        return send_outcomes.failed(message)
    if message.status == OutboxStatus.UNCERTAIN:
        return send_outcomes.uncertain(message)
    connector = connector_for(ctx, message.channel)
    if connector is None:
        return _unavailable(ctx, tool=message.tool, channel=message.channel)
    outbound = build_message(ctx, message)
    if message.status == OutboxStatus.SENDING:
        settled = provider_faults.recover(ctx, message, connector=connector, outbound=outbound)
        if settled is not None:
            return settled
    if ctx.facts.is_suppressed(channel=message.channel, address=message.recipient):
        # Suppressed since the send was decided (a STOP came in): it never goes out.
        return send_outcomes.failed(outbox.record_failed(ctx, message, error="the recipient opted out or bounced"))
    return _send(ctx, message, connector=connector, outbound=outbound)


def flush_pending(ctx: EpisodeContext) -> list[SendOutcome]:
    """Settle the run's rows whose time has come: held sends (runs.outbox.hold), rows the provider did not
    take (retried), rows a human said were "not sent", and `sending` rows whose lookup is due
    (runs.provider_faults). Called before every episode's own work and alone by a flush episode (runs.execution).

    A row waits while its `not_before` is ahead or (a new send) its contact's
    send window is closed; a held row whose window or cap moved on is held
    again to the next instant it may go (a later flush episode sends it).
    Suppression is checked again when it goes out (`deliver`).
    """
    outcomes = []
    for message in ctx.facts.unsettled:
        if _still_held(ctx, message):
            continue
        if message.status == OutboxStatus.PENDING and message.not_before is None and _window_closed(ctx, message):
            continue
        outcome = deliver(ctx, message)
        record(ctx, JournalKind.NOTE, {"runtime": True, "text": f"pending {message.channel} message: {outcome.status}",
                                       "outbox_id": message.pk, "status": outcome.status})
        outcomes.append(outcome)
    return outcomes


def connector_for(ctx: EpisodeContext, channel: str) -> Connector | None:
    """The organization's active identity's connector for `channel`; a sandbox one for simulated runs.

    None when a real run's organization has no identity on the channel.
    """
    # Real identities first: a sandbox identity serves only organizations that have nothing else.
    identity = ctx.facts.identity(channel)
    if ctx.run.sim:
        # Never a real connector (nor its secrets) for a simulation, whatever identity exists.
        identity = identity or Identity(organization_id=ctx.run.organization_id, channel=channel,
                                        address=f"sandbox:{channel}", sandbox=True)
        return registry.connector_class(Channel.SANDBOX)(identity, secrets={})
    if identity is None:
        return None
    return registry.connector_for(identity)


def build_message(ctx: EpisodeContext, message: OutboxMessage) -> OutboundMessage:
    """The provider message for a row: always from the row's payload, so a resend is the same message."""
    payload = message.payload
    body = payload.get("body") or payload.get("text") or payload.get("brief") or ""
    in_reply_to, references = _thread(ctx, message)
    return OutboundMessage(
        idem_key=message.idem_key, channel=message.channel, to=message.recipient, body=body,
        subject=payload.get("subject"), brief=payload.get("brief"), in_reply_to=in_reply_to, references=references,
        run_token=message_ids.reply_token(ctx.run_id) if message.channel == Channel.EMAIL else None,
        metadata={"run_id": ctx.run_id, "outbox_id": message.pk}, sent_at=ctx.now,
    )


def _thread(ctx: EpisodeContext, message: OutboxMessage) -> tuple[str | None, list[str]]:
    """(In-Reply-To, References) answering the run's last inbound message on the row's channel up to its episode.

    Email threads on the inbound's Message-ID, Slack on its thread_ref; both are
    read from the episode payload or the stored InboundMessage it names (read with the episode's facts).
    Bounded by the row's episode, so a resend after a crash threads as the first try did.
    """
    channel = message.channel
    if channel not in (Channel.EMAIL, Channel.SLACK):
        return None, []
    upto = _episode_seq(ctx, message)
    inbound = [reply["payload"] or {} for reply in reversed(ctx.facts.messages)
               if reply["kind"] == EpisodeKind.INBOUND and reply["seq"] <= upto
               and (reply["payload"] or {}).get("channel") == channel]
    for payload in inbound[:THREAD_LOOKBACK]:
        stored = ctx.facts.inbound_headers.get(payload.get("inbound_message_id")) or {}
        headers = {**stored, **(payload.get("headers") or {}), **payload}
        if channel == Channel.SLACK:
            if headers.get("thread_ref"):
                return headers["thread_ref"], []
            continue
        message_id = headers.get("message_id") or headers.get("Message-ID")
        if not message_id:
            continue
        references = list(headers.get("references") or message_ids.split_references(headers.get("References")))
        if message_id not in references:
            references.append(message_id)
        return message_id, references
    return None, []


def _episode_seq(ctx: EpisodeContext, message: OutboxMessage) -> int:
    """The seq of the row's episode: this episode's, or read with the facts for the rows they hold
    (EpisodeFacts.episode_seqs); looked up only for a row read elsewhere."""
    if message.episode_id == ctx.episode.pk:
        return ctx.episode.seq
    seq = ctx.facts.episode_seqs.get(message.episode_id)
    if seq is None:
        seq = Episode.objects.filter(pk=message.episode_id).values_list("seq", flat=True).first()
    return seq or 0


def _send(ctx: EpisodeContext, message: OutboxMessage, *, connector: Connector,
          outbound: OutboundMessage) -> SendOutcome:
    sending = _begin_within_caps(ctx, message, unflushed=connector.records_in_database)
    if isinstance(sending, SendOutcome):
        return sending
    if sending is None:  # settled meanwhile (a human resolved it): read it again
        return deliver(ctx, OutboxMessage.objects.get(pk=message.pk))
    return _call_provider(ctx, sending, connector=connector, outbound=outbound)


def _call_provider(ctx: EpisodeContext, sending: OutboxMessage, *, connector: Connector,
                   outbound: OutboundMessage) -> SendOutcome:
    """The provider call for a row already `sending`, and its result (recorded by the next fence)."""
    faults.point("before_provider_call")
    _confirm_lease(ctx)
    try:
        result = connector.send(outbound)
    except ConnectorError as failure:
        return provider_faults.failed_call(ctx, sending, failure, connector=connector)
    faults.point("after_provider_call")
    # Before record_sent, which clears the row's error in hand: an error there means the provider is back.
    provider_faults.sent_after_failure(ctx, sending)
    sent = outbox.record_sent(ctx, sending, provider_message_id=result.provider_message_id)
    faults.point("after_record")
    return send_outcomes.sent(sent, adopted=False)


def _begin_within_caps(ctx: EpisodeContext, message: OutboxMessage, *,
                       unflushed: bool) -> OutboxMessage | SendOutcome | None:
    """begin_send, with the per-contact caps counted again under the address's lock when the plan has caps:
    another run may have taken the last slot since this send was decided. A row already `sending` (resent
    after a lookup said "not found") was counted when it first went out and is not checked again."""
    # A simulation's caps count only its own sends, and one lease holder makes them: no race to close.
    contact = _contact_of(ctx, message)
    if (ctx.run.sim or message.status != OutboxStatus.PENDING or contact is None
            or not compliance.has_caps(ctx.plan)):
        return outbox.begin_send(ctx, message, unflushed=unflushed)
    recount = compliance.recount(ctx, recipient=message.recipient, now=clock.now(ctx.run))
    sending = outbox.begin_send(ctx, message, within_caps=recount, unflushed=unflushed)
    capped = recount.deferral(ctx, run=ctx.latest, contact=contact) if sending is None else None
    if capped is None:
        return sending
    # Held: a pending row is not counted, so it needs no lock.
    held = outbox.hold(ctx, message, not_before=capped[0])
    if held.status != OutboxStatus.PENDING:  # settled meanwhile: read it again
        return None
    record(ctx, JournalKind.POLICY_BLOCK, {"tool": message.tool, "rule": "per_contact_cap", "cap": capped[1],
                                           "recipient": message.recipient, "outbox_id": message.pk,
                                           "deferred_until": capped[0].isoformat(), "at_send": True})
    return send_outcomes.held(held)


def _open_within_caps(ctx: EpisodeContext, *, contact: Contact, key: str, tool: str, channel: str, recipient: str,
                      task_key: str, ordinal: int, payload: dict, unflushed: bool) -> OutboxMessage | None:
    """A new send's row, written `sending` (the attempt begins with it) under the address's lock by the statement
    that counts the caps again, if they leave room; else pending until the cap frees up. Another run may have taken
    the last slot since this send was decided; the lock keeps any other from taking it until this row is committed.
    None when the row's guard stopped it (outbox.open_row)."""
    opening = dict(key=key, tool=tool, channel=channel, recipient=recipient, task_key=task_key, ordinal=ordinal,
                   payload=payload, guarded=True)
    recount = compliance.recount(ctx, recipient=recipient, now=clock.now(ctx.run))
    message = outbox.open_row(ctx, **opening, sending=True, within_caps=recount, unflushed=unflushed)
    if message is not None:
        return message
    capped = recount.deferral(ctx, run=ctx.latest, contact=contact)
    if capped is None:  # the guard stopped it
        return None
    # Held: a pending row is not counted, so it needs no lock.
    message = outbox.open_row(ctx, **opening, not_before=capped[0])
    if message is not None:
        # Nothing leaves the process: the entry waits for the episode's next fenced write.
        ctx.journal(JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "per_contact_cap", "cap": capped[1],
                                               "recipient": recipient, "outbox_id": message.pk,
                                               "deferred_until": capped[0].isoformat(), "at_send": True})
    return message


def _confirm_lease(ctx: EpisodeContext) -> None:
    """Confirm the lease right before the provider call; raise LeaseLost if another worker took the run.

    The fence stops a paused worker's database writes, not its provider
    calls: without this, a worker stalled between `begin_send` and the call
    (SIGSTOP, a long GC pause) could resume after a successor looked the key
    up, found nothing and sent it, and send it a second time. Half a lease
    left (or a renewal) also keeps any successor out until this call has
    finished or timed out (the request timeout is below half the lease). What
    is left is a stall between this check and the request leaving the process.
    """
    if ctx.heartbeat is not None:
        ctx.heartbeat.check()
    # The fenced write that wrote the row `sending` extended the lease to a full one from when it was sent, and
    # only a successor's claim (after that lease expires) or a cancellation (after which nothing of the run is sent
    # again) moves it: if that write was sent moments ago, it is the check, and reading the lease again would only
    # confirm it. Any longer (a stall, a paused worker), the lease is read: still ours with half of it left (more
    # than any provider request takes), or renewed as the heartbeat would.
    if ctx.fenced_at is not None and time.monotonic() - ctx.fenced_at < FENCE_CONFIRMS_S:
        return
    if leases.holds(ctx.run_id, epoch=ctx.epoch, owner=ctx.owner, seconds_left=settings.LUCIA_LEASE_SECONDS / 2):
        return
    if not leases.renew(ctx.run_id, epoch=ctx.epoch, owner=ctx.owner):
        raise leases.LeaseLost(f"run {ctx.run_id}: lease of epoch {ctx.epoch} lost before the provider call")


def _guardrail(ctx: EpisodeContext, *, tool: str, channel: str, recipient: str, payload: dict) -> SendOutcome | None:
    if settings.LUCIA_GUARDRAIL_MODEL:
        # The guardrail model journals its own call (journaled.call_model): what led to it is written first.
        ctx.flush()
    verdict = guardrails.review(ctx, tool=tool, channel=channel, recipient=recipient, payload=payload)
    if verdict.model or not verdict.allowed:
        record(ctx, JournalKind.GUARDRAIL, {"tool": tool, "allowed": verdict.allowed, "rule": verdict.rule,
                                            "reason": verdict.reason, "model": verdict.model})
    if verdict.allowed:
        return None
    escalate(ctx, kind=EscalationKind.GUARDRAIL_BLOCK,
             prompt=f"A {channel} message was blocked by the guardrail ({verdict.rule}): {verdict.reason}. "
                    f"It was not sent; your answer is guidance the agent reads before its next message.",
             context={"tool": tool, "recipient": recipient, "payload": payload, "rule": verdict.rule,
                      "model": verdict.model})
    return SendOutcome("blocked", f"blocked by the guardrail ({verdict.rule}); a human will review it",
                       escalated=True)


def _unavailable(ctx: EpisodeContext, *, tool: str, channel: str) -> SendOutcome:
    record(ctx, JournalKind.NOTE, {"runtime": True, "tool": tool, "text": f"no active {channel} identity"})
    return SendOutcome("unavailable", f"the organization has no {channel} sender set up; try another channel")


def _window_closed(ctx: EpisodeContext, message: OutboxMessage) -> bool:
    return _window_opens(ctx, message) is not None


def _window_opens(ctx: EpisodeContext, message: OutboxMessage) -> datetime | None:
    """None when the row's contact may be reached now, else when the window opens."""
    contact = _contact_of(ctx, message)
    return policy.check_send_window(ctx.plan, contact_tz=contact.timezone if contact else "",
                                    org_tz=ctx.run.organization.default_timezone, now=ctx.now,
                                    run_id=ctx.run.offset_key)


def _contact_of(ctx: EpisodeContext, message: OutboxMessage) -> Contact | None:
    return next((c for c in ctx.contacts if outbox.normalize_recipient(message.channel, c) == message.recipient),
                None)


def _still_held(ctx: EpisodeContext, message: OutboxMessage) -> bool:
    """Whether a held row (pending with `not_before`) may not go out now.

    Due but its window closed again (a late worker) or its cap still reached
    (another send took the slot): it is held again to the next instant it may go.
    """
    if message.status == OutboxStatus.SENDING:  # waiting for its lookup (runs.provider_faults)
        return message.not_before is not None and message.not_before > ctx.now
    if message.status != OutboxStatus.PENDING or message.not_before is None:
        return False
    if message.not_before > ctx.now:
        return True
    later = _window_opens(ctx, message)
    contact = _contact_of(ctx, message)
    if later is None and contact is not None:
        capped = compliance.cap_deferral(ctx, recipient=message.recipient, contact=contact)
        later = capped[0] if capped is not None else None
    if later is None:
        return False
    message.not_before = outbox.hold(ctx, message, not_before=later).not_before
    return True
