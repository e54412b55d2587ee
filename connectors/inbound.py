"""The inbound message store: every webhook item is kept here before anything else happens.

Providers retry webhooks, so a message is stored once per (channel, provider
id); the caller learns whether this delivery is the first and routes only then.
Routing itself (which run) lives in runs.inbound_routing, a floor above.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from agents.models import Organization
from connectors import attachments
from connectors.base import ParsedInbound
from connectors.models import InboundMessage, InboundStatus

# Field limits of InboundMessage: provider values are cut to fit rather than refused.
_LIMITS = {"provider_id": 255, "from_address": 254, "to_address": 254, "subject": 998}


def store(
    parsed: ParsedInbound, *, channel: str, organization: Organization | None
) -> tuple[InboundMessage, bool]:
    """Store the item; returns (message, created). created=False: a repeated delivery, already handled.

    Call inside a transaction: a concurrent duplicate waits on the unique index
    and then finds this row. The files' bytes go to connectors.attachments; the
    message's `attachments` keeps their description only.
    """
    headers = dict(parsed.headers)
    if parsed.in_reply_to:
        headers["in_reply_to"] = parsed.in_reply_to
    if parsed.references:
        headers["references"] = list(parsed.references)
    if parsed.thread_ref:
        headers["thread_ref"] = parsed.thread_ref
    if parsed.idem_key:
        headers["idem_key"] = parsed.idem_key
    message = InboundMessage(
        channel=channel,
        provider_id=without_nul(parsed.provider_id)[: _LIMITS["provider_id"]],
        organization=organization,
        kind=parsed.kind,
        from_address=without_nul(parsed.from_address)[: _LIMITS["from_address"]],
        to_address=without_nul(parsed.to_address)[: _LIMITS["to_address"]],
        subject=without_nul(parsed.subject)[: _LIMITS["subject"]],
        text=without_nul(parsed.text),
        attachments=without_nul(attachments.metadata(parsed.attachments)),
        headers=without_nul(headers),
        raw=without_nul(parsed.raw),
        status=InboundStatus.UNMATCHED,
    )
    created = _insert_unless_stored(message)
    if not created:
        message = InboundMessage.objects.get(channel=message.channel, provider_id=message.provider_id)
    if created and parsed.attachments:
        attachments.store_for_message(message, parsed.attachments)
    return message, created


def _insert_unless_stored(message: InboundMessage) -> bool:
    """Insert the row unless its (channel, provider id) is stored already: one statement, where get_or_create
    would look first and insert in a savepoint. The conflict is on inbound_unique_provider_id: a concurrent
    duplicate waits for the other transaction, and the caller then reads the row it stored.
    Returns whether it was inserted (then `message.pk` is set)."""
    fields = [field for field in InboundMessage._meta.concrete_fields if not field.primary_key]
    values = [field.get_db_prep_save(field.pre_save(message, add=True), connection) for field in fields]
    columns, placeholders = ", ".join(field.column for field in fields), ", ".join(["%s"] * len(fields))
    insert = f"INSERT INTO {InboundMessage._meta.db_table} ({columns}) VALUES ({placeholders})"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(f"{insert} ON CONFLICT (channel, provider_id) DO NOTHING RETURNING id", values)
        row = cursor.fetchone()
    if row is None:
        return False
    message.pk = row[0]
    message._state.adding = False
    return True


def mark_matched(message: InboundMessage, *, run_id: int, organization_id: int, by_user=None, note: str = "") -> None:
    """Routed to the run; `by_user`: a person attached it (an unmatched message, in the Studio)."""
    _update(message, status=InboundStatus.MATCHED, matched_run_id=run_id, organization_id=organization_id)
    if by_user is not None:
        _record_triage(message, by_user=by_user, note=note)


def mark_unmatched(message: InboundMessage, *, organization_id: int | None, run_id: int | None = None) -> None:
    """Left for triage. `run_id`: the run it named but that could not take it (ended)."""
    _update(message, status=InboundStatus.UNMATCHED, matched_run_id=run_id, organization_id=organization_id)


def mark_ignored(message: InboundMessage) -> None:
    """Handled without a run (STOP/START/HELP keywords): kept for the record, not triage."""
    _update(message, status=InboundStatus.IGNORED, matched_run_id=message.matched_run_id,
            organization_id=message.organization_id)


def mark_dismissed(message: InboundMessage, *, by_user, note: str) -> None:
    """A person decided no run needs this unmatched message; who, when and why are kept."""
    _update(message, status=InboundStatus.DISMISSED, matched_run_id=message.matched_run_id,
            organization_id=message.organization_id)
    _record_triage(message, by_user=by_user, note=note)


def _record_triage(message: InboundMessage, *, by_user, note: str) -> None:
    message.triaged_by = by_user
    message.triaged_at = timezone.now()
    message.triage_note = note
    message.save(update_fields=["triaged_by", "triaged_at", "triage_note"])


def _update(message: InboundMessage, *, status: str, matched_run_id: int | None, organization_id: int | None) -> None:
    message.status = status
    message.matched_run_id = matched_run_id
    message.organization_id = organization_id
    message.save(update_fields=["status", "matched_run_id", "organization"])
    attachments.follow_message(message)


def without_nul(value: Any) -> Any:
    """The value with NUL characters removed: PostgreSQL text and jsonb refuse them, and a refused
    insert would make the provider retry forever."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(item) for item in value]
    return value
