"""A run's sends in the outbox: one row per intended send, found again by its key.

The key comes from runtime state only (DESIGN §6 Tools), so a re-executed
episode finds the row its first attempt wrote, and the row's payload (not a
rewritten one) is what goes out. Every write runs under the lease fence and
re-reads the row locked, so a transition is applied only from the state the
caller saw. Drafts awaiting approval are released or discarded here too, on a human's answer (runs.approvals).
"""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from connectors import addresses
from runs import clock, compliance, escalations, leases, statements
from runs.context import EpisodeContext
from runs.models import Contact, Episode, EpisodeStatus, EscalationKind, OutboxMessage, OutboxStatus, Run

# What `mark_sent` moves from (runs.models.outbox).
SENT_FROM = (OutboxStatus.SENDING, OutboxStatus.UNCERTAIN, OutboxStatus.PENDING)
# What `begin_send` moves from.
BEGIN_FROM = [OutboxStatus.PENDING.value, OutboxStatus.SENDING.value]
# The two as written into the riders' texts (constants, not parameters: runs.statements.literals).
SENT_FROM_SQL, BEGIN_FROM_SQL = statements.literals(SENT_FROM), statements.literals(BEGIN_FROM)


def normalize_recipient(channel: str, contact: Contact) -> str:
    """The contact's address on `channel`, normalized so one person has one key; '' when it has none."""
    if channel == "email":
        return addresses.normalize_email(contact.email)
    if channel in addresses.PHONE_CHANNELS:
        return addresses.normalize_phone(contact.phone)
    if channel == "slack":
        return contact.slack_user.strip()
    return ""


def idem_key(*, run_id: int, episode_id: int, task_key: str, tool: str, recipient: str, ordinal: int) -> str:
    parts = (str(run_id), str(episode_id), task_key, tool, recipient, str(ordinal))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def unsettled_for(run_id: int) -> list[OutboxMessage]:
    """The run's rows waiting to be sent (held by the window or a cap, refused by the provider for now, or a
    human said "it was not sent") or waiting for a lookup (`sending`: the outcome of an attempt is unknown),
    oldest first."""
    rows = OutboxMessage.objects.filter(run_id=run_id, status__in=(OutboxStatus.PENDING, OutboxStatus.SENDING))
    return list(rows.order_by("created_at", "id"))


def open_row(ctx: EpisodeContext, *, key: str, tool: str, channel: str, recipient: str, task_key: str,
             ordinal: int, payload: dict, not_before: datetime | None = None,
             awaiting_approval: bool = False, human_override: bool = False, sending: bool = False,
             guarded: bool = False, within_caps: compliance.Recount | None = None,
             unflushed: bool = False) -> OutboxMessage | None:
    """The row for `key`, created pending when new; an existing row keeps its first payload.

    `not_before` holds the send (the window is closed or a cap is reached): the row waits for a flush.
    `awaiting_approval`: a draft that nothing sends until a human approves it (runs.approvals).
    `sending`: the attempt begins with the row (begin_send in the same write): the caller sends right after
    this fence, which confirmed and extended the lease.

    `guarded`: the statement writes the row only if the address is still not suppressed and no human has taken
    the run over (the checks read those at the episode's start); None when one of them stopped it.
    `within_caps` (compliance.recount: the address's lock taken and the caps counted in the same statement): the row
    is written only if the caps leave room, else None.
    `unflushed`: the send goes to a connector whose sends are rows of this database (Connector.records_in_database):
    nothing leaves Lucia after this write, so its commit need not wait for the disk (leases.unflushed).

    The episode's rows were read with its facts (runs.episode_facts) and the key names the episode, so only
    this lease holder can have written one: the row is found there or inserted, never looked up.
    """
    existing = ctx.facts.outbox_by_key.get(key)
    if existing is not None:
        return existing
    status = OutboxStatus.AWAITING_APPROVAL if awaiting_approval else OutboxStatus.PENDING
    message = OutboxMessage(
        idem_key=key, run_id=ctx.run_id, episode_id=ctx.episode.pk, task_key=task_key, tool=tool, channel=channel,
        recipient=recipient, ordinal=ordinal, payload=payload, created_at=ctx.now, not_before=not_before,
        status=OutboxStatus.SENDING if sending else status, human_override=human_override,
        attempts=1 if sending else 0, attempted_at=clock.wall_now() if sending else None,
    )
    # One statement: the fence, the pending journal entries (the tool call) and the row.
    rider = _insert_rider(message, guarded=guarded, within_caps=within_caps)
    run = ctx.write((rider + leases.unflushed()) if unflushed else rider)
    message.pk = getattr(run, rider.returning.rpartition(" AS ")[2])
    if message.pk is None:
        return None
    message._state.adding = False
    ctx.facts.remember_row(message)
    if sending:
        ctx.facts.count_send(message)
    return message


# The guard of a new send (open_row(guarded=True)): written only while the address is not suppressed and no
# human has taken the run over, as the statement sees them under the run's lock.
GUARD_SQL = """NOT EXISTS (SELECT 1 FROM connectors_suppression s WHERE s.organization_id = fenced.organization_id
                          AND s.channel = r.channel AND s.address = r.recipient)
       AND NOT EXISTS (SELECT 1 FROM runs_escalation x
                        WHERE x.run_id = fenced.id AND x.kind = 'handoff' AND x.status = 'open')"""
# The row as one JSON parameter read as the table's row type (`r`): each value parsed by its column's type (a
# varchar's length checked, as the INSERT checks it); the statement's text stays short (psycopg converts a text's
# placeholders once only up to 4096 characters). `{columns}`: every column but the id.
INSERT_SQL = """,
{name} AS (INSERT INTO runs_outboxmessage ({columns}) SELECT {values} FROM fenced,
           jsonb_populate_record(NULL::runs_outboxmessage, %({name}_row)s::jsonb) AS r{where} RETURNING id)"""


def _insert_rider(message: OutboxMessage, *, guarded: bool, within_caps: compliance.Recount | None) -> leases.Rider:
    """The row's INSERT as a rider of the fence's statement (written only when the fence holds), last."""
    name = f"outbox_row_{leases.tag()}"
    columns, values, attnames = _insert_columns()
    # Its datetimes are the only values JSON has no form for.
    held = message.__dict__  # every field's value (Model.__init__ set them all), read without a descriptor
    row = json.dumps({column: held[attname] for column, attname in attnames}, default=datetime.isoformat)
    conditions = ([GUARD_SQL] if guarded else []) + ([within_caps.room] if within_caps is not None else [])
    where = f"\n     WHERE {' AND '.join(conditions)}" if conditions else ""
    sql = INSERT_SQL.format(name=name, columns=columns, values=values, where=where)
    insert = leases.Rider(sql=sql, params={f"{name}_row": row},
                          returning=f", (SELECT id FROM {name}) AS {name}")  # noqa: S608 (a name, no value)
    return insert if within_caps is None else within_caps.rider + insert


@functools.cache
def _insert_columns() -> tuple[str, str, list[tuple[str, str]]]:
    """The INSERT's columns, its values (read from `r`) and each column's attribute, once per process."""
    fields = [field for field in OutboxMessage._meta.concrete_fields if not field.primary_key]
    return (", ".join(f'"{field.column}"' for field in fields), ", ".join(f'r."{field.column}"' for field in fields),
            [(field.column, field.attname) for field in fields])


def release_draft(message_id: int, *, payload: dict | None = None) -> OutboxMessage | None:
    """A human approved the draft (with `payload` when they edited it): pending, the next flush sends it.

    Runs outside the lease, in the transaction that closes the approval (its run row is locked there);
    None when the row is no longer a draft.
    """
    locked = OutboxMessage.objects.select_for_update(no_key=True).get(pk=message_id)
    if locked.status != OutboxStatus.AWAITING_APPROVAL:
        return None
    locked.approve()
    fields = ["status"]
    if payload is not None:
        locked.payload = payload
        fields.append("payload")
    locked.save(update_fields=fields)
    return locked


def discard_draft(message_id: int) -> OutboxMessage | None:
    """A human rejected the draft: it is never sent. Same transaction rules as release_draft."""
    locked = OutboxMessage.objects.select_for_update(no_key=True).get(pk=message_id)
    if locked.status != OutboxStatus.AWAITING_APPROVAL:
        return None
    locked.reject()
    locked.save(update_fields=["status"])
    return locked


def hold(ctx: EpisodeContext, message: OutboxMessage, *, not_before: datetime) -> OutboxMessage:
    """Keep a pending row waiting until `not_before` (its window or cap moved on before it could go out)."""
    with ctx.fence():
        locked = lock_row(message)
        if locked.status == OutboxStatus.PENDING:
            locked.not_before = not_before
            locked.save(update_fields=["not_before"])
    return locked


def begin_send(ctx: EpisodeContext, message: OutboxMessage, *, within_caps: compliance.Recount | None = None,
               unflushed: bool = False) -> OutboxMessage | None:
    """pending|sending → sending with one more attempt, stamped with the wall time of the attempt (a later
    lookup waits for its settle window from there); None when the row moved on (nothing to send).

    One fenced statement (the UPDATE a rider of the fence's): its WHERE re-reads the row's status under the row's
    lock, as a locked read would. While the row is pending or sending only this lease holder writes it, so the row
    in hand is the row, with the attempt applied. `within_caps`: as open_row's; None also when the caps leave no room.
    `unflushed`: as open_row's.
    """
    attempted_at = clock.wall_now()
    rider = _begin_rider(message, attempted_at=attempted_at, within_caps=within_caps)
    run = ctx.write((rider + leases.unflushed()) if unflushed else rider)
    attempts = getattr(run, rider.returning.rpartition(" AS ")[2])
    if attempts is None:
        return None
    message.begin_send()  # the transition the statement applied (status is protected); its count is the row's
    message.attempts, message.attempted_at, message.not_before, message.lookups = attempts, attempted_at, None, 0
    if ctx.loaded_facts is not None:
        ctx.loaded_facts.count_send(message)
    return message


def _begin_rider(message: OutboxMessage, *, attempted_at: datetime,
                 within_caps: compliance.Recount | None) -> leases.Rider:
    """begin_send's UPDATE as a rider of the fence's statement, last; returns the row's attempts (NULL: it moved on)."""
    name = f"outbox_begin_{leases.tag()}"
    room = f" AND {within_caps.room}" if within_caps is not None else ""
    update = leases.Rider(
        sql=f""",
{name} AS (
    UPDATE runs_outboxmessage
       SET status = 'sending', attempts = attempts + 1, attempted_at = %({name}_at)s, not_before = NULL, lookups = 0
     WHERE id = %({name}_id)s AND status IN ({BEGIN_FROM_SQL}) AND EXISTS (SELECT 1 FROM fenced){room}
 RETURNING attempts
)""",  # noqa: S608 (constants; every value is a parameter)
        params={f"{name}_at": attempted_at, f"{name}_id": message.pk},
        returning=f", (SELECT attempts FROM {name}) AS {name}",  # noqa: S608
    )
    return update if within_caps is None else within_caps.rider + update


def record_sent(ctx: EpisodeContext, message: OutboxMessage, *, provider_message_id: str) -> OutboxMessage:
    """The provider took it: `sent`, written by the episode's next fence (its close, usually) with whatever else
    that fence writes. Until then the row reads `sending`, which is what a crash in between must leave: the
    next attempt asks the provider and adopts the send (runs.provider_faults)."""
    if message.status != OutboxStatus.SENT:
        message.mark_sent()
        message.provider_message_id = (provider_message_id or "")[:200]
        message.sent_at = ctx.now
        message.error = ""
        message.not_before = None
        ctx.pending_riders.append(_sent_rider(message))
    return message


def _sent_rider(message: OutboxMessage) -> leases.Rider:
    """The `sent` write as a rider of the next fence's statement; a row that settled otherwise meanwhile is
    left as it is."""
    name = f"outbox_sent_{leases.tag()}"
    return leases.Rider(
        sql=f""",
{name} AS (
    UPDATE runs_outboxmessage
       SET status = 'sent', provider_message_id = %({name}_provider)s, sent_at = %({name}_at)s, error = '',
           not_before = NULL
     WHERE id = %({name}_id)s AND status IN ({SENT_FROM_SQL}) AND EXISTS (SELECT 1 FROM fenced)
)""",  # noqa: S608 (constants; every value is a parameter)
        params={f"{name}_provider": message.provider_message_id, f"{name}_at": message.sent_at,
                f"{name}_id": message.pk},
    )


def record_failed(ctx: EpisodeContext, message: OutboxMessage, *, error: str) -> OutboxMessage:
    """Failed for good: a permanent provider error or a suppressed recipient. Never retried."""
    with ctx.fence():
        locked = lock_row(message)
        if locked.status in (OutboxStatus.PENDING, OutboxStatus.SENDING):
            locked.mark_failed()
            locked.error = error[:4000]
            locked.save(update_fields=["status", "error"])
    return locked


def record_not_sent(ctx: EpisodeContext, message: OutboxMessage, *, error: str) -> OutboxMessage:
    """Back to pending: the provider confirmed it never got the message; a later attempt sends it."""
    with ctx.fence():
        locked = lock_row(message)
        if locked.status == OutboxStatus.SENDING:
            locked.mark_not_sent()
            locked.error = error[:4000]
            locked.save(update_fields=["status", "error"])
    return locked


def record_retry(ctx: EpisodeContext, message: OutboxMessage, *, error: str, not_before: datetime) -> OutboxMessage:
    """sending → pending until `not_before`: the provider certainly did not take it (nothing left the process,
    or it refused for now), so it is sent again then, with no lookup and no human."""
    with ctx.fence():
        locked = lock_row(message)
        if locked.status == OutboxStatus.SENDING:
            locked.mark_not_sent()
            locked.error = error[:4000]
            locked.not_before = not_before
            locked.save(update_fields=["status", "error", "not_before"])
    return locked


def await_lookup(ctx: EpisodeContext, message: OutboxMessage, *, not_before: datetime, error: str = "",
                 lookup_failed: bool = False) -> OutboxMessage:
    """Keep a `sending` row until `not_before`, when the provider is asked whether it took it. Nothing is sent
    again before that lookup says "not found". `lookup_failed`: a lookup could not be answered now (counted)."""
    with ctx.fence():
        locked = lock_row(message)
        if locked.status == OutboxStatus.SENDING:
            locked.not_before = not_before
            fields = ["not_before"]
            if error:
                locked.error = error[:4000]
                fields.append("error")
            if lookup_failed:
                locked.lookups += 1
                fields.append("lookups")
            locked.save(update_fields=fields)
    return locked


def record_uncertain(ctx: EpisodeContext, message: OutboxMessage, *, error: str,
                     lookup: dict | None = None) -> OutboxMessage:
    """Nobody can say whether it went out: `uncertain` and one escalation; the run waits for a human.

    Row and escalation are written in one fenced transaction, so an uncertain
    row always has its question open. `lookup`: what the provider's lookup answered, kept in the
    escalation's context ("provider_lookup") for the person who decides.
    """
    with ctx.fence() as run:
        locked = lock_row(message)
        if locked.status == OutboxStatus.SENDING:
            _make_uncertain(run, locked, episode=ctx.episode, error=error, lookup=lookup)
    return locked


def record_abandoned(run: Run, episode: Episode, *, error: str) -> list[OutboxMessage]:
    """The run's sends that nobody will settle once `episode` is given up (runs.execution.give_up; `run` is the
    open run its fence locked): rows `sending` whose lookup is not ahead (`not_before` unset: in flight; or past:
    its lookup was this episode's to make; runs.provider_faults holds a row it will look up later with a
    `not_before` ahead, and a flush episode is queued for then), except a row whose own episode is still to run
    (it finds its row by key and looks it up). The provider may or may not have taken each: each becomes
    `uncertain` with its own question, as when a lookup cannot answer (`record_uncertain`), which says when the
    provider's records can be trusted (its settle window from the last attempt), so that whatever the person
    deciding on the failed episode does, the message's fate is on record."""
    still_to_run = Episode.objects.filter(run_id=run.pk, status__in=[EpisodeStatus.QUEUED, EpisodeStatus.RUNNING])
    abandoned = list(OutboxMessage.objects.select_for_update(no_key=True)
                     .filter(Q(not_before__isnull=True) | Q(not_before__lte=clock.now(run)),
                             run_id=run.pk, status=OutboxStatus.SENDING)
                     .exclude(episode_id__in=still_to_run.values("pk")).order_by("pk"))
    for message in abandoned:
        attempted = message.attempted_at or message.created_at
        trusted = attempted + timedelta(seconds=settings.LUCIA_SEND_SETTLE_SECONDS)
        _make_uncertain(run, message, episode=episode,
                        error=f"{error}; last attempted {attempted:%Y-%m-%d %H:%M:%S} UTC, so the provider's records "
                              f"show it from {trusted:%H:%M:%S} UTC at the latest",
                        extra={"attempted_at": attempted.isoformat(), "records_trusted_from": trusted.isoformat()})
    return abandoned


def _make_uncertain(run: Run, locked: OutboxMessage, *, episode: Episode, error: str, extra: dict | None = None,
                    lookup: dict | None = None) -> None:
    locked.mark_uncertain()
    locked.error = error[:4000]
    locked.save(update_fields=["status", "error"])
    escalations.open_escalation(
        run, kind=EscalationKind.UNCERTAIN_SEND, episode=episode, outbox_message=locked,
        prompt=(f"A {locked.channel} message to {locked.recipient} may or may not have been sent: {error}. "
                "Check the provider's records and say which."),
        context={"outbox_message_id": locked.pk, "tool": locked.tool, "payload": locked.payload, **(extra or {}),
                 **({"provider_lookup": lookup} if lookup else {})},
    )


def lock_row(message: OutboxMessage) -> OutboxMessage:
    """The row as it stands, locked until the transaction ends."""
    return OutboxMessage.objects.select_for_update(no_key=True).get(pk=message.pk)
