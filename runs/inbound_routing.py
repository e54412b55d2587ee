"""Which run a stored inbound message belongs to, and handing it to that run.

Routing reads only addressing data — the reply-to token, our own Message-IDs,
the Slack thread, the phone number, the idempotency key in a callback URL —
never what the message says: inbound text is untrusted and only becomes
episode payload. A message no open run takes is kept and goes to triage (an
`unmatched_inbound` Escalation), never dropped. A message for a run that has
ended goes to triage too, with the run named, so a human sees a late answer.
"""

from __future__ import annotations

import hashlib
import logging

from django.db.models import Func, Value

from agents.models import Organization
from connectors import addresses, attachments, inbound, message_ids
from connectors.models import Channel, InboundMessage
from runs import escalations, events
from runs.models import Contact, Episode, EpisodeKind, OutboxMessage, OutboxStatus, Run
from runs.models.run import OPEN_RUN_STATUSES

log = logging.getLogger(__name__)

DEDUPE_KEY_MAX = 200
TRIAGE_TEXT_CHARS = 500


def deliver(message: InboundMessage, *, organization: Organization | None) -> Episode | None:
    """Route a newly stored message: an episode on its run (returned), or triage (None).

    `organization` is the one whose identity received it (None when unknown:
    the email reply-to domain is Lucia's, not an organization's).
    """
    run = find_run(message, organization=organization)
    if run is None:
        triage(message, organization=organization, reason="no_run")
        return None
    try:
        return hand_to_run(message, run)
    except events.RunEnded:
        triage(message, organization=run.organization, reason="run_ended", run=run)
        return None


def hand_to_run(message: InboundMessage, run: Run, *, by_user=None, note: str = "") -> Episode | None:
    """The message becomes an inbound episode of `run` and is marked matched; raises events.RunEnded.

    `by_user`: a person attached an unmatched message (runs.inbound_triage); the episode is the same as routing
    would have made. None: the provider's id was already taken by an episode of this run.
    """
    episode = events.record_event(
        run, kind=episode_kind(message), payload=episode_payload(message), dedupe_key=dedupe_key(message)
    )
    inbound.mark_matched(message, run_id=run.pk, organization_id=run.organization_id, by_user=by_user, note=note)
    return episode


def find_run(message: InboundMessage, *, organization: Organization | None) -> Run | None:
    """The run the message answers, or None. Only runs of `organization` when it is known."""
    sim = None if message.channel == Channel.SANDBOX else False
    for candidate in _candidates(message, organization=organization, sim=sim):
        if candidate is not None and (organization is None or candidate.organization_id == organization.pk):
            return candidate
    return None


def _candidates(message: InboundMessage, *, organization: Organization | None, sim: bool | None):
    """Candidate runs, most specific first; evaluated lazily, so the first hit ends the search."""
    headers = message.headers or {}
    if message.channel in (Channel.EMAIL, Channel.SANDBOX):
        yield run_for_reply_address(message.to_address)
        yield run_for_message_ids(headers.get("in_reply_to"), " ".join(headers.get("references") or []))
    if headers.get("idem_key"):
        yield run_for_send(headers["idem_key"])
    if headers.get("thread_ref"):
        yield run_for_thread(headers["thread_ref"], organization=organization)
    if organization is None:
        return
    if message.channel in (Channel.SMS, Channel.VOICE) or (
            message.channel == Channel.SANDBOX and message.from_address.startswith("+")):
        yield newest_run_for_phone(organization, phone=message.from_address, sim=sim)
    if message.channel == Channel.SLACK or (
            message.channel == Channel.SANDBOX and _payload_channel(message) == Channel.SLACK):
        yield newest_run_for_slack_user(organization, user=message.from_address, sim=sim)


def run_for_reply_address(address: str) -> Run | None:
    run_id = message_ids.parse_reply_address(address) if address else None
    return Run.objects.select_related("organization").filter(pk=run_id).first() if run_id else None


def run_for_message_ids(*headers: str | None) -> Run | None:
    """The run that sent one of the Message-IDs in In-Reply-To/References (the newest reference first)."""
    for prefix in message_ids.key_prefixes_in(*headers):
        # A range on the unique idem_key index (hex keys sort below "g"); LIKE could not use it.
        sent = OutboxMessage.objects.filter(
            idem_key__gte=prefix, idem_key__lt=prefix + "g", idem_key__startswith=prefix
        ).select_related("run__organization").first()
        if sent:
            return sent.run
    return None


def run_for_send(idem_key: str) -> Run | None:
    """The run of one of our sends, by the key a callback URL or tracking metadata carries."""
    sent = OutboxMessage.objects.filter(idem_key=idem_key).select_related("run__organization").first()
    return sent.run if sent else None


def run_for_thread(thread_ref: str, *, organization: Organization | None) -> Run | None:
    """The run whose Slack message ("<channel>:<ts>") is the root of the thread."""
    sent = OutboxMessage.objects.filter(channel=Channel.SLACK, provider_message_id=thread_ref)
    if organization is not None:
        sent = sent.filter(run__organization=organization)
    found = sent.select_related("run__organization").order_by("-created_at").first()
    return found.run if found else None


def newest_run_for_phone(organization: Organization, *, phone: str, sim: bool | None) -> Run | None:
    """The newest open run of the organization with a contact at this number (stored forms vary)."""
    number = addresses.normalize_phone(phone)
    if not number:
        return None
    # Only the organization's open runs' contacts are normalized (run_org_status index), not the whole table.
    contacts = Contact.objects.filter(
        run__organization=organization, run__status__in=OPEN_RUN_STATUSES
    ).annotate(
        normalized=Func("phone", Value(r"[^0-9]"), Value(""), Value("g"), function="regexp_replace")
    ).filter(normalized=number.lstrip("+"))
    return _newest_open(organization, run_ids=contacts.values("run_id"), sim=sim)


def newest_run_for_slack_user(organization: Organization, *, user: str, sim: bool | None) -> Run | None:
    if not user:
        return None
    return _newest_open(organization, run_ids=Contact.objects.filter(slack_user=user).values("run_id"), sim=sim)


def _newest_open(organization: Organization, *, run_ids, sim: bool | None) -> Run | None:
    runs = Run.objects.filter(organization=organization, status__in=OPEN_RUN_STATUSES, pk__in=run_ids)
    if sim is not None:
        # A real provider's message never reaches a simulated run (personas share no real numbers).
        runs = runs.filter(sim=sim)
    return runs.select_related("organization").order_by("-created_at", "-pk").first()


def triage(message: InboundMessage, *, organization: Organization | None, reason: str, run: Run | None = None) -> None:
    """Keep the message for a human. Without an organization there is nobody to ask: it stays
    unmatched in the inbound store (the admin lists it) and a warning is logged."""
    inbound.mark_unmatched(message, organization_id=organization.pk if organization else None,
                           run_id=run.pk if run else None)
    if organization is None:
        log.warning("inbound %s %s matched no organization", message.channel, message.pk)
        return
    sender = message.from_address or "an unknown sender"
    prompt = (f"A {message.channel} message from {sender} arrived for run {run.pk}, which has ended."
              if run else f"A {message.channel} message from {sender} matched no open run.")
    escalations.open_unmatched(organization, inbound_message_id=message.pk, prompt=prompt, context={
        "reason": reason, "channel": message.channel, "from": message.from_address, "to": message.to_address,
        "subject": message.subject, "text": message.text[:TRIAGE_TEXT_CHARS], "run_id": run.pk if run else None,
    })


def episode_kind(message: InboundMessage) -> str:
    return EpisodeKind.CALL_REPORT if message.kind == "call_report" else EpisodeKind.INBOUND


def episode_payload(message: InboundMessage) -> dict:
    headers = message.headers or {}
    payload = {
        "channel": _payload_channel(message),
        "text": message.text,
        "subject": message.subject,
        "from": message.from_address,
        # Descriptions with the stored rows' ids; the bytes stay in connectors.Attachment.
        # (None to read when the message lists none: connectors.attachments keeps one row per listed file.)
        "attachments": [attachments.describe(row) for row in message.files.order_by("pk")] if message.attachments
        else [],
        "headers": {"in_reply_to": headers.get("in_reply_to"), "references": headers.get("references") or []},
        "inbound_message_id": message.pk,
    }
    if message.kind == "call_report":
        payload["transcript"] = message.text
    return payload


def dedupe_key(message: InboundMessage) -> str:
    key = f"{message.channel}:{message.provider_id}"
    if len(key) <= DEDUPE_KEY_MAX:
        return key
    return f"{message.channel}:sha256:{hashlib.sha256(message.provider_id.encode()).hexdigest()}"


def _payload_channel(message: InboundMessage) -> str:
    """The channel the contact used; a sandbox message says so itself or is told by its addresses."""
    if message.channel != Channel.SANDBOX:
        return message.channel
    named = (message.raw or {}).get("channel")
    if named in Channel.values:
        return named
    return Channel.EMAIL if "@" in message.from_address else Channel.SMS


def organization_of_send(idem_key: str | None) -> Organization | None:
    """The organization that made the send a tracking event is about (None when the key is unknown)."""
    run = run_for_send(idem_key) if idem_key else None
    return run.organization if run else None


def note_failed_delivery(idem_key: str, *, status: str, detail: str) -> int:
    """Write a failed delivery onto the outbox row's `error`; returns rows changed.

    Only `sent` rows: the status itself is the worker's to move under its fence
    (there is no sent → failed transition), and a row still `sending` belongs to
    a worker that is about to write it. The DeliveryEvent keeps the full story.
    """
    text = f"delivery {status}" + (f" (error {detail})" if detail else "")
    return OutboxMessage.objects.filter(idem_key=idem_key, status=OutboxStatus.SENT).update(error=text)
