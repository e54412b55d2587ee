"""Sends under provider faults (DESIGN §10): what a failed provider call, or a row found `sending`, leads to.

- The provider certainly did not take it (nothing left the process: refused,
  DNS, TLS handshake; or it refused for now: 429): the row goes back to
  `pending` until a backoff passes and a flush episode sends it again. No
  lookup, no human.
- The outcome is unknown (timeout, reset after sending, 5xx, a crash after the
  call began): the row stays `sending` and nothing is sent again before a
  lookup says "not found". The lookup waits for a settle window measured from
  the attempt (`attempted_at`), so a message the provider accepted slowly is
  found rather than sent twice. A lookup the provider cannot answer for now is
  asked again with a backoff, up to LUCIA_SEND_LOOKUP_TRIES; a lookup that
  cannot answer at all, or past that, makes the row `uncertain` and asks a human.
- A lookup that matched on something other than our key (SMS body hash, a call
  to the recipient) is adopted only when exactly one candidate is left after
  ruling out what another send of ours owns, and no other send of ours to the
  recipient is itself unresolved. The candidates went from the organization's
  own number, so each is some outbox row's send: with every other row either
  recorded (its id ruled out) or settled, the one left is this row's. That is
  a match on our sends, never on the recipient alone.
- A failing provider raises one alert per organization and channel
  (runs.escalations.raise_outage), not one escalation per message; the first
  call that goes through again closes it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings

from connectors import suppressions
from connectors.base import Connector, ConnectorError, LookupResult, OutboundMessage
from connectors.models import Channel, SuppressionReason
from runs import clock, escalations, outbox, send_outcomes
from runs.context import EpisodeContext
from runs.episode_records import record
from runs.models import JournalKind, OutboxMessage, OutboxStatus
from runs.send_outcomes import SendOutcome

logger = logging.getLogger(__name__)

# Twilio: the recipient replied STOP. Suppressed for the whole organization, like an inbound STOP.
OPTED_OUT_CODES = {"21610"}
# A message that failed this many attempts in a row means the provider is down, not a blip: alert.
OUTAGE_AFTER_ATTEMPTS = 2


def recover(ctx: EpisodeContext, message: OutboxMessage, *, connector: Connector,
            outbound: OutboundMessage) -> SendOutcome | None:
    """A row found `sending`: held until its lookup is due, then adopted, held again, or uncertain.

    None means the provider confirmed it never got the message: the caller sends it.
    """
    wait = settle_remaining(message, connector=connector)
    if wait > 0:
        return send_outcomes.held(outbox.await_lookup(ctx, message, not_before=ctx.now + timedelta(seconds=wait)),
                                  why="its last attempt may have reached the provider; it is looked up then")
    ctx.flush()  # the tool call that led here is journaled before the provider is asked
    asked = connector.lookup(outbound, sent_after=message.attempted_at or message.created_at)
    looked = rule_out_our_other_sends(ctx, message, asked)
    if looked.found:
        _provider_answered(ctx, message)
        adopted = outbox.record_sent(ctx, message, provider_message_id=looked.provider_message_id or "")
        return send_outcomes.sent(adopted, adopted=True)
    if looked.found is None and looked.transient and message.lookups + 1 < settings.LUCIA_SEND_LOOKUP_TRIES:
        error = "the provider could not be asked whether it took the message"
        escalations.raise_outage(ctx.run.organization_id, channel=message.channel, error=error)
        held = outbox.await_lookup(ctx, message, not_before=ctx.now + backoff(message.lookups + 1), error=error,
                                   lookup_failed=True)
        return send_outcomes.held(held, why="the provider cannot be asked now whether it took it; asked again then")
    if looked.found is None:
        uncertain = outbox.record_uncertain(ctx, message, error="the provider could not say whether it was sent",
                                            lookup=lookup_report(asked, looked, message=message))
        return send_outcomes.uncertain(uncertain)
    _provider_answered(ctx, message)
    return None


def failed_call(ctx: EpisodeContext, message: OutboxMessage, failure: ConnectorError, *,
                connector: Connector) -> SendOutcome:
    """After `connector.send` raised: failed for good, held for a lookup, or held for a retry."""
    error = f"{failure.code or 'error'}: {failure}"
    if failure.permanent:
        failed = outbox.record_failed(ctx, message, error=error)
        if failure.code in OPTED_OUT_CODES:
            suppressions.suppress(ctx.run.organization, channel=message.channel, address=message.recipient,
                                  reason=SuppressionReason.STOP)
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": message.tool, "rule": "provider_refused", "code": failure.code,
                                               "error": str(failure), "outbox_id": message.pk})
        return send_outcomes.failed(failed)
    if message.attempts >= OUTAGE_AFTER_ATTEMPTS:
        escalations.raise_outage(ctx.run.organization_id, channel=message.channel, error=error)
    if failure.outcome_unknown:
        # It may have reached the provider: the same as a crash after the call began, looked up after settling.
        settle = timedelta(seconds=settle_remaining(message, connector=connector))
        held = outbox.await_lookup(ctx, message, not_before=ctx.now + settle, error=error)
        logger.warning("run %s: %s send %s outcome unknown (%s); looked up in %s", ctx.run_id, message.channel,
                       message.pk, error, settle)
        return send_outcomes.held(held, why="its outcome is unknown; the provider is asked then")
    retry = outbox.record_retry(ctx, message, error=error, not_before=ctx.now + backoff(message.attempts))
    logger.warning("run %s: %s send %s did not reach the provider (%s); retried at %s", ctx.run_id, message.channel,
                   message.pk, error, retry.not_before)
    return send_outcomes.held(retry, why="the provider could not be reached; it is sent again then")


def sent_after_failure(ctx: EpisodeContext, message: OutboxMessage) -> None:
    """A send went through: when it had failed before, the provider is back."""
    _provider_answered(ctx, message)


def rule_out_our_other_sends(ctx: EpisodeContext, message: OutboxMessage, looked: LookupResult) -> LookupResult:
    """A heuristic match (candidates) narrowed to this send: ids another of our rows recorded are not it; if
    several are left, or another of our sends to the recipient is itself unresolved, nobody can tell."""
    if not looked.found or not looked.candidates:
        return looked
    # The recipient first: its index (outbox_recipient_time) keeps this to the person's own history.
    ours = OutboxMessage.objects.filter(recipient=message.recipient, channel=message.channel,
                                        run__organization_id=ctx.run.organization_id)
    claimed = set(ours.filter(provider_message_id__in=looked.candidates).exclude(pk=message.pk)
                  .values_list("provider_message_id", flat=True))
    left = [candidate for candidate in looked.candidates if candidate not in claimed]
    if not left:
        return LookupResult(found=False)
    rivals = ours.filter(provider_message_id="",
                         status__in=(OutboxStatus.SENDING, OutboxStatus.UNCERTAIN)).exclude(pk=message.pk)
    if message.channel != Channel.VOICE:  # SMS candidates matched the body: only a rival with the same text counts
        rivals = rivals.filter(payload=message.payload)
    if len(left) > 1 or rivals.exists():
        return LookupResult(found=None)
    return LookupResult(found=True, provider_message_id=left[0])


def lookup_report(asked: LookupResult, looked: LookupResult, *, message: OutboxMessage) -> dict:
    """What the provider's lookup said, in words for the person who decides whether it was sent."""
    if asked.found is None and asked.transient:
        said = f"the provider could not be asked ({message.lookups + 1} lookup(s) failed: unreachable or erroring)"
    elif asked.found is None:
        said = f"the {message.channel} provider keeps no record this send can be matched to"
    elif asked.candidates:
        said = (f"the provider has {len(asked.candidates)} message(s) that may be this one, and another of this "
                "organization's sends may be any of them")
    else:
        said = "the provider's answer did not settle it"
    return {"said": said, "found": looked.found, "transient": asked.transient,
            "candidates": list(asked.candidates), "lookups": message.lookups + 1,
            "attempts": message.attempts, "asked_at": clock.wall_now().isoformat()}


def settle_remaining(message: OutboxMessage, *, connector: Connector) -> float:
    """Seconds until a lookup for the row's last attempt may be trusted (0: now). Provider time is wall time."""
    settle = settle_seconds(connector_settle=connector.settle_seconds, channel=message.channel)
    if settle <= 0:
        return 0.0
    attempted = message.attempted_at or message.created_at
    return max(0.0, (attempted + timedelta(seconds=settle) - clock.wall_now()).total_seconds())


def settle_seconds(*, connector_settle: float | None, channel: str) -> float:
    if connector_settle is not None or channel == Channel.SANDBOX:
        return float(connector_settle or 0)
    return float(settings.LUCIA_SEND_SETTLE_SECONDS)


def backoff(failures: int) -> timedelta:
    """Wait before the next try after `failures` failed ones: doubling from LUCIA_SEND_RETRY_SECONDS, capped."""
    seconds = settings.LUCIA_SEND_RETRY_SECONDS * 2 ** max(failures - 1, 0)
    return timedelta(seconds=min(seconds, settings.LUCIA_SEND_RETRY_MAX_SECONDS))


def _provider_answered(ctx: EpisodeContext, message: OutboxMessage) -> None:
    """Close the outage alert, if the row saw the provider fail (a row that never failed costs no query)."""
    if message.error or message.lookups:
        escalations.clear_outage(ctx.run.organization_id, channel=message.channel)
