"""The plan's `compliance` rules before a new send: deterministic, checked in a fixed order.

Forbidden phrases block (a human reviews); an acknowledgement the plan's
`acknowledge` does not allow blocks (runs.acknowledgements); a run a human took over (an open
`handoff` escalation), a channel the contact opted out of (runs.policy.memory)
and a suppressed address block; the contact's absence defers to their return; the
send window and the per-contact caps defer (never drop): the ToolExecutor
holds the message in the outbox until `deferred_until` and a flush episode
sends it then; the follow-up ladder keeps its own schedule. Required opt-out
text is added by the runtime, so the model cannot forget it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from runs import acknowledgements, leases, policy, statements
from runs.context import EpisodeContext
from runs.episode_records import escalate, record
from runs.models import Contact, EscalationKind, JournalKind, OutboxStatus, Run
from runs.policy import memory

# Which payload field carries the opt-out text, per tool (a call's brief is spoken, not a message).
OPT_OUT_FIELD = {"send_email": "body", "send_sms": "body", "send_slack": "text"}
CAP_WINDOWS = (("per_day", timedelta(days=1)), ("per_week", timedelta(days=7)))


@dataclass(frozen=True)
class Hold:
    """Why a send does not go out now: status `blocked` or `deferred` (until `deferred_until`)."""

    status: str
    message: str
    deferred_until: datetime | None = None
    escalated: bool = False


def with_opt_out(plan: dict, *, tool: str, channel: str, payload: dict) -> dict:
    """The payload with the channel's required opt-out text appended when it is not already there."""
    opt_out = ((plan.get("compliance") or {}).get("opt_out_text") or {}).get(channel)
    field_name = OPT_OUT_FIELD.get(tool)
    if not opt_out or not field_name or opt_out.casefold() in str(payload.get(field_name, "")).casefold():
        return payload
    return {**payload, field_name: f"{str(payload.get(field_name, '')).rstrip()}\n\n{opt_out}"}


def text_of(payload: dict) -> str:
    """Everything a person reads or hears in the payload."""
    return "\n".join(str(value) for value in payload.values() if isinstance(value, str))


def forbidden_phrases(plan: dict, *, payload: dict) -> list[str]:
    """The plan's forbidden phrases that the payload's text contains (case-insensitive)."""
    text = text_of(payload).casefold()
    phrases = (plan.get("compliance") or {}).get("forbidden_phrases") or []
    return [phrase for phrase in phrases if phrase.strip() and phrase.casefold() in text]


def check(ctx: EpisodeContext, *, tool: str, channel: str, recipient: str, contact: Contact,
          payload: dict) -> Hold | None:
    """A Hold when the plan's rules stop this send now (journaled as policy_block), else None."""
    phrases = forbidden_phrases(ctx.plan, payload=payload)
    if phrases:
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "forbidden_phrases", "phrases": phrases})
        escalate(ctx, kind=EscalationKind.GUARDRAIL_BLOCK,
                 prompt=f"A {channel} message was blocked: it contains {', '.join(map(repr, phrases))}. "
                        f"It was not sent; your answer is guidance the agent reads before its next message.",
                 context={"tool": tool, "recipient": recipient, "payload": payload, "phrases": phrases})
        return Hold("blocked", "blocked: the message contains forbidden phrases; a human will review it",
                    escalated=True)
    refused = acknowledgements.refusal(ctx, text=text_of(payload))
    if refused is not None:
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "acknowledge",
                                               "mode": acknowledgements.mode(ctx.plan)})
        return Hold("blocked", refused)
    if ctx.facts.handed_off:
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "handled_by_human"})
        return Hold("blocked", "blocked: a human is handling this run; send nothing until they hand it back")
    if channel in memory.opted_out(contact.history):
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "contact_opted_out", "channel": channel})
        return Hold("blocked", f"blocked: the contact opted out of {channel}; do not use it")
    if ctx.facts.is_suppressed(channel=channel, address=recipient):
        record(ctx, JournalKind.POLICY_BLOCK, {"tool": tool, "rule": "suppressed", "recipient": recipient})
        return Hold("blocked", f"blocked: the {channel} address opted out or bounced; do not contact it")
    org_tz = ctx.run.organization.default_timezone
    away = memory.absent_until(contact.history, now=ctx.now)
    if away is not None:
        tz = policy.resolve_timezone(ctx.plan, contact_tz=contact.timezone, org_tz=org_tz)
        back = policy.clamp_defer(ctx.plan, requested=away, now=ctx.now, tz=tz, run_id=ctx.run.offset_key)
        record(ctx, JournalKind.POLICY_BLOCK,
               {"tool": tool, "rule": "contact_absent", "deferred_until": back.isoformat()})
        return Hold("deferred", f"deferred until {back.isoformat()}: the contact is away", deferred_until=back)
    deferred = policy.check_send_window(ctx.plan, contact_tz=contact.timezone, org_tz=org_tz, now=ctx.now,
                                        run_id=ctx.run.offset_key)
    if deferred is not None:
        record(ctx, JournalKind.POLICY_BLOCK,
               {"tool": tool, "rule": "send_window", "deferred_until": deferred.isoformat()})
        return Hold("deferred", f"deferred until {deferred.isoformat()}: outside the contact's send window",
                    deferred_until=deferred)
    capped = cap_deferral(ctx, recipient=recipient, contact=contact)
    if capped is not None:
        until, rule = capped
        record(ctx, JournalKind.POLICY_BLOCK,
               {"tool": tool, "rule": "per_contact_cap", "cap": rule, "recipient": recipient,
                "deferred_until": until.isoformat()})
        return Hold("deferred", f"deferred until {until.isoformat()}: the contact's {rule} message cap is reached",
                    deferred_until=until)
    return None


def has_caps(plan: dict) -> bool:
    return bool(_limits(plan))


def address_lock(organization_id: int, *, recipient: str) -> str:
    """The name of the organization's lock on one address (a transaction-level advisory lock, on its hash): a send
    counts the caps under it (`recount`), so two runs writing to the same person at once cannot both see room for
    one more message. The address alone, whatever the channel: a text and a call reach the same number, and the
    caps count its sends on both."""
    return f"lucia:contact:{organization_id}:{recipient}"


@dataclass(frozen=True)
class Recount:
    """The per-contact caps counted again inside the statement that records a send, under the address's lock
    (`address_lock`): `rider` takes the lock and counts them (a CTE of the fence's statement, runs.leases.Rider),
    `room` is the SQL condition that one more send fits every cap, which the statement's write of the row requires.
    The lock lasts until that statement's transaction ends, so the row it writes is committed before the next send
    to the address counts. The row's guard (runs.outbox.sends.GUARD_SQL: suppression, a human's takeover) reads the
    statement's own snapshot, taken before any wait for the lock: a STOP committed during that wait is seen by the
    next send, as one committed just after the statement is. A real run's sends only (a simulation's caps count its
    own sends, which one lease holder makes: no race to close)."""

    rider: leases.Rider
    room: str
    name: str
    limits: list[tuple[str, int, timedelta]]
    now: datetime

    def deferral(self, ctx: EpisodeContext, *, run: Run, contact: Contact) -> tuple[datetime, str] | None:
        """(when the cap frees up, which cap) when the statement that returned `run` found no room, else None."""
        return _deferral(ctx, limits=self.limits, times=getattr(run, self.name), now=self.now, contact=contact)


def recount(ctx: EpisodeContext, *, recipient: str, now: datetime) -> Recount:
    """The caps' recount of a real run's send to `recipient` as of `now` (the run's clock, later than the episode's
    start: sends recorded since the episode began count)."""
    limits = _limits(ctx.plan)
    name = f"caps_{leases.tag()}"
    longest = max((span for _, _, span in limits), default=timedelta(0))
    params = {f"{name}_lock": address_lock(ctx.run.organization_id, recipient=recipient),
              f"{name}_recipient": recipient, f"{name}_organization": ctx.run.organization_id,
              f"{name}_since": now - longest, f"{name}_until": now}
    caps = {window: limit for window, limit, _ in limits}
    for window, span in CAP_WINDOWS:
        params[f"{name}_{window}"] = caps.get(window)
        params[f"{name}_{window}_since"] = now - span
    # Names only in the SQL; every value is a parameter.
    rider = leases.Rider(sql=RECOUNT_SQL.replace("{name}", name), params=params,
                         returning=f", (SELECT times FROM {name}) AS {name}")  # noqa: S608
    return Recount(rider=rider, room=f"(SELECT room FROM {name})", name=name, limits=limits, now=now)  # noqa: S608


def cap_deferral(ctx: EpisodeContext, *, recipient: str, contact: Contact,
                 now: datetime | None = None) -> tuple[datetime, str] | None:
    """(when the cap frees up, which cap) when another send to `recipient` would exceed a cap, else None.

    Caps count the organization's sends to the recipient (every run, rolling
    windows on the run's clock): one person gets at most per_day messages a
    day from the organization, however many agents chase them. `now`: the
    instant to count up to when it is later than the episode's.
    """
    limits = _limits(ctx.plan)
    if not limits:
        return None
    longest = max(span for _, _, span in limits)
    if now is None and ctx.facts.sends_by_recipient is not None:
        # The sends read with the episode, its own included (EpisodeFacts.count_send).
        now = ctx.now
        sends = ctx.facts.sends_by_recipient.get(recipient, [])
        times = sorted(at for at in (sent_at or created_at for created_at, sent_at in sends)
                       if now - longest < at <= now)
    else:
        now = now or ctx.now
        times = recent_send_times(ctx.run, recipient=recipient, since=now - longest, until=now)
    return _deferral(ctx, limits=limits, times=times, now=now, contact=contact)


def _limits(plan: dict) -> list[tuple[str, int, timedelta]]:
    """The plan's caps: (window, most messages in it, its span)."""
    caps = (plan.get("compliance") or {}).get("per_contact_caps") or {}
    return [(name, int(caps[name]), span) for name, span in CAP_WINDOWS if caps.get(name)]


def _deferral(ctx: EpisodeContext, *, limits: list[tuple[str, int, timedelta]], times: list[datetime],
              now: datetime, contact: Contact) -> tuple[datetime, str] | None:
    """cap_deferral's answer from the send times in the longest window up to `now`, oldest first."""
    free_at, rule = None, ""
    for name, limit, span in limits:
        inside = [at for at in times if at > now - span]
        if len(inside) >= limit:
            # The window holds `limit - 1` sends once this one ages out.
            candidate = inside[len(inside) - limit] + span
            if free_at is None or candidate > free_at:
                free_at, rule = candidate, name
    if free_at is None:
        return None
    tz = policy.resolve_timezone(ctx.plan, contact_tz=contact.timezone, org_tz=ctx.run.organization.default_timezone)
    return policy.clamp_defer(ctx.plan, requested=free_at, now=now, tz=tz, run_id=ctx.run.offset_key), rule


# Rows that reached (or may have reached) the recipient: what per-contact caps count.
COUNTED_STATUSES = (OutboxStatus.SENDING, OutboxStatus.SENT, OutboxStatus.UNCERTAIN)


def recent_send_times(run: Run, *, recipient: str, since: datetime, until: datetime) -> list[datetime]:
    """When the run's organization sent (or may have sent) to `recipient` in (since, until], oldest first.

    A real run counts every real run of its organization. A simulated run
    counts only its own sends: each simulation has its own virtual clock and
    personas, and says nothing about what another one's recipient received.
    """
    # A held row counts from when it went out (sent_at), not from when it was decided. Prepared (runs.statements).
    with statements.cursor() as cursor:
        params = {"recipient": recipient, "since": since, "until": until}
        if run.sim:
            cursor.execute(SIM_SEND_TIMES_SQL, {**params, "run": run.pk})
        else:
            cursor.execute(SEND_TIMES_SQL, {**params, "organization": run.organization_id})
        times = [at for (at,) in cursor.fetchall()]
    return sorted(at for at in times if since < at <= until)


# The send times recent_send_times counts. A real run counts every real run of its organization: lucia_send_times
# (runs/migrations/0018_send_times_functions.py; the statuses are COUNTED_STATUSES). A simulation counts its own rows.
SEND_TIMES_SQL = """
    SELECT t FROM lucia_send_times(%(recipient)s::text, %(organization)s::bigint, %(since)s::timestamptz,
                                   %(until)s::timestamptz) AS t"""
SIM_SEND_TIMES_SQL = """
    SELECT coalesce(m.sent_at, m.created_at) FROM runs_outboxmessage m
     WHERE m.recipient = %(recipient)s AND m.status IN (__COUNTED__) AND m.run_id = %(run)s
       AND ((m.created_at > %(since)s AND m.created_at <= %(until)s)
            OR (m.sent_at > %(since)s AND m.sent_at <= %(until)s))""".replace(
    "__COUNTED__", statements.literals(COUNTED_STATUSES))

# Recount's CTE: the address's lock taken and, once it is granted, the send times recent_send_times reads for a real
# run, read by lucia_send_times_locked (its query takes a snapshot of its own after the lock: see that migration);
# and whether each cap leaves room for one more (`_ROOM`: a window's count under its limit; a NULL limit, a cap the
# plan does not set, leaves room). A CTE is read once, so the lock is taken once. On one line: psycopg converts a
# statement's placeholders once per text only up to 4096 characters.
_ROOM = " AND ".join(
    f"coalesce(count(*) FILTER (WHERE t > %({{name}}_{window}_since)s) < %({{name}}_{window})s::integer, true)"
    for window, _ in CAP_WINDOWS)
RECOUNT_SQL = " ".join(""",
{name} AS (
    SELECT coalesce(array_agg(t ORDER BY t), '{}') AS times, {room} AS room
      FROM unnest(lucia_send_times_locked(%({name}_lock)s::text, %({name}_recipient)s::text,
                                          %({name}_organization)s::bigint, %({name}_since)s::timestamptz,
                                          %({name}_until)s::timestamptz)) AS sends (t)
     WHERE t > %({name}_since)s AND t <= %({name}_until)s
)""".replace("{room}", _ROOM).split())
