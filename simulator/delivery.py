"""Persona messages reach the runtime through the webhook intake and routing, as a provider's webhook would.

Only the provider's network is replaced (DESIGN §10): each message becomes
the ParsedInbound a provider's webhook would parse — on the sandbox channel,
with a provider id, the sender's address and the addressing data a real
client keeps — and goes to lucia_site.webhooks.intake. So the intake stores
and dedupes it, and runs.inbound_routing finds the run from what was minted:
the reply-to token and our Message-IDs (email), the Slack thread or the
sender's Slack user, the phone number (SMS), the status-callback key (a call
report). A message routing cannot place goes to triage, as in production.

A persona message keeps one provider id (`sim:<run>:<role>:<n>`), so a
redelivery of it is the provider delivering the same message twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.models import Organization
from connectors import message_ids
from connectors.base import ParsedInbound
from connectors.models import Channel, InboundMessage, InboundStatus
from lucia_site.webhooks import intake
from runs import inbound_routing
from runs.models import Episode
from simulator import sim_org
from simulator.persona_traits import Action


@dataclass
class Delivery:
    """A persona action as it reached the runtime: the episode it became (None: a keyword, a duplicate, triage)."""

    action: Action
    episode_id: int | None
    note: str = ""
    # A redelivery the intake did not dedupe: it made a second episode.
    duplicated: bool = False


def deliver(action: Action, *, run_id: int, organization: Organization) -> Delivery:
    item = parsed(action, run_id=run_id, organization=organization)
    if action.kind == "stop":
        # An SMS STOP: stored, the number suppressed for the organization, the run told (lucia_site intake).
        intake.receive([item], channel=Channel.SANDBOX, organization=organization)
        return Delivery(action, None, note="opt-out keyword: the number is suppressed")
    episodes = Episode.objects.filter(run_id=run_id)
    before = episodes.count() if action.redelivery else 0
    message, episode = intake.route_message(item, channel=Channel.SANDBOX, organization=organization)
    if action.redelivery:
        made = episodes.count() - before
        note = (f"delivered again: {made} new episode(s), the intake did not dedupe it" if made
                else "delivered again with the same provider id: deduped by the intake")
        return Delivery(action, None, note=note, duplicated=bool(made))
    if message.status != InboundStatus.MATCHED or message.matched_run_id != run_id:
        return Delivery(action, None, note=f"routing found no open run for it: kept for triage ({message.status})")
    if episode is None:  # its provider id was already an episode of the run's (record_event found the key taken)
        episode = episodes.filter(dedupe_key=inbound_routing.dedupe_key(message)).first()
    return Delivery(action, episode.pk if episode else None, note=_route(message))


def parsed(action: Action, *, run_id: int, organization: Organization) -> ParsedInbound:
    """The webhook item a provider would hand over for this action."""
    answered = action.answers
    fields: dict = {}
    if action.kind == "call_report":
        # A call's report comes back on the status callback that names the call's idempotency key.
        fields["idem_key"] = answered.idem_key if answered else None
    elif action.channel == Channel.EMAIL:
        fields.update(_email_addressing(action, run_id=run_id, organization=organization))
    elif action.channel == Channel.SLACK and action.via == "thread" and answered and answered.provider_message_id:
        fields["thread_ref"] = answered.provider_message_id
    kind = {"stop": "stop", "call_report": "call_report"}.get(action.kind, "message")
    return ParsedInbound(
        provider_id=provider_id(action, run_id=run_id), kind=kind, from_address=action.sender, subject=action.subject,
        text=action.text, attachments=[dict(entry) for entry in action.attachments],
        raw={"channel": action.channel, "simulated_run": run_id, "trait": action.trait, "via": action.via,
             **({"language": action.language} if action.language else {})},
        **fields,
    )


def provider_id(action: Action, *, run_id: int) -> str:
    return f"sim:{run_id}:{action.role}:{action.number}"


def _email_addressing(action: Action, *, run_id: int, organization: Organization) -> dict:
    """A mail client's reply: To the Reply-To, with In-Reply-To/References naming the message answered.

    `via: thread` writes to the organization's mailbox instead, so only the Message-ID can find the run;
    an email that answers no email of the run (the persona switched channel) has neither and goes to triage.
    """
    answered = action.answers if action.answers and action.answers.channel == Channel.EMAIL else None
    mailbox = sim_org.sandbox_addresses(organization.slug)[Channel.EMAIL]
    if answered is None:
        return {"to_address": mailbox}
    message_id = message_ids.message_id_for(answered.idem_key)
    to = mailbox if action.via == "thread" or not answered.run_token else message_ids.address_for_token(
        answered.run_token)
    return {"to_address": to, "in_reply_to": message_id, "references": [message_id]}


def _route(message: InboundMessage) -> str:
    headers = message.headers or {}
    if message_ids.parse_reply_address(message.to_address):
        return "routed by the reply-to token"
    if headers.get("in_reply_to"):
        return "routed by In-Reply-To/References"
    if headers.get("thread_ref"):
        return "routed by the Slack thread"
    if headers.get("idem_key"):
        return "routed by the call's status-callback key"
    if message.from_address.startswith("+"):
        return "routed by the phone number"
    return "routed by the Slack user"
