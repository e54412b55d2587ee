"""The start of an episode in one statement: pick the next due episode, mark it running, and read everything the
episode needs (its tasks, outbox rows, journal history, the organization's identities, suppressions and the sends
its caps count) — the "claim + load" transaction of DESIGN §10.

Called in the transaction that holds the run row: right after the lease claim (runs.leases.claim_run) for a
worker's first episode, under a fence for the next ones. `facts_for` reads the same facts for an episode
context built some other way (tests, tools called outside the worker), on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from connectors import addresses
from connectors.models import Identity
from runs import clock, json_rows, statements
from runs.episode_facts import EpisodeFacts
from runs.models import Contact, Episode, OutboxMessage, Run, Task

# The longest per-contact cap window (runs.compliance.CAP_WINDOWS): how far back the caps' sends are read.
CAPS_LOOKBACK = timedelta(days=7)
HISTORY_ENTRIES = 20
# The seq that stands for "after every episode" when facts are read outside one (the column is an integer).
UNBOUNDED_SEQ = 2**31 - 1

# The next episode to run: one left running under an older epoch first (resume), then the first due by seq.
PICK_SQL = """
candidate AS (
    SELECT id, seq FROM runs_episode
     WHERE run_id = %(run)s
       AND ((status = 'running' AND lease_epoch < %(epoch)s) OR (status = 'queued' AND due_at <= %(now)s))
     ORDER BY status DESC, seq
     LIMIT 1
),
started AS (
    UPDATE runs_episode e
       SET status = 'running', attempts = e.attempts + 1, lease_epoch = %(epoch)s, started_at = %(now)s
      FROM candidate c
     WHERE e.id = c.id AND %(open)s AND (e.status = 'queued' OR e.attempts < %(max_attempts)s)
 RETURNING e.*
),
activated AS (
    UPDATE runs_run SET status = 'active', wake_when = NULL, updated_at = %(wall)s
     WHERE id = %(run)s AND status = 'waiting' AND EXISTS (SELECT 1 FROM started)
 RETURNING id
)"""

FACTS_SQL = """
    (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM runs_task t WHERE t.run_id = %(run)s) AS tasks,
    (SELECT coalesce(json_agg(o ORDER BY o.created_at, o.id), '[]') FROM runs_outboxmessage o
      WHERE o.run_id = %(run)s
        AND (o.episode_id = (SELECT id FROM candidate) OR o.status IN ('pending', 'sending'))) AS outbox,
    (SELECT j.at FROM runs_journalentry j WHERE j.episode_id = (SELECT id FROM candidate)
      ORDER BY j.seq LIMIT 1) AS first_entry_at,
    (SELECT coalesce(json_agg(json_build_object('seq', e.seq, 'payload', e.payload) ORDER BY e.seq), '[]')
       FROM runs_episode e WHERE e.run_id = %(run)s AND e.kind = 'human_answer') AS human_answers,
    (SELECT coalesce(json_agg(json_build_object('id', e.id, 'seq', e.seq, 'kind', e.kind, 'status', e.status,
                                                'payload', e.payload) ORDER BY e.seq), '[]')
       FROM runs_episode e WHERE e.run_id = %(run)s AND e.kind IN ('inbound', 'call_report')) AS messages,
    (SELECT coalesce(json_object_agg(m.id, m.headers), '{}') FROM connectors_inboundmessage m
      WHERE m.id IN (SELECT (e.payload ->> 'inbound_message_id')::bigint FROM runs_episode e
                      WHERE e.run_id = %(run)s AND e.kind = 'inbound'
                        AND jsonb_typeof(e.payload -> 'inbound_message_id') = 'number')) AS inbound_headers,
    (SELECT coalesce(json_agg(h ORDER BY h.seq), '[]') FROM (
        SELECT j.seq, j.kind, j.data, j.at FROM runs_journalentry j JOIN runs_episode e ON e.id = j.episode_id
         WHERE j.run_id = %(run)s AND e.seq < (SELECT seq FROM candidate) AND j.kind <> 'model_call'
         ORDER BY j.seq DESC LIMIT %(history)s) h) AS history,
    (SELECT coalesce(json_agg(i ORDER BY i.sandbox, i.id), '[]') FROM connectors_identity i
      WHERE i.organization_id = %(org)s) AS identities,
    (SELECT coalesce(json_agg(json_build_array(s.channel, s.address)), '[]') FROM connectors_suppression s
      WHERE s.organization_id = %(org)s AND s.address = ANY(%(addresses)s)) AS suppressions,
    EXISTS (SELECT 1 FROM runs_escalation x
             WHERE x.run_id = %(run)s AND x.kind = 'handoff' AND x.status = 'open') AS handed_off,
    {caps} AS sends"""

# Sends counted against caps: a simulation counts only its own, a real run every real run of its organization.
CAPS_SQL = """(SELECT coalesce(json_agg(json_build_array(o.recipient, o.created_at, o.sent_at)), '[]')
       FROM runs_outboxmessage o JOIN runs_run r ON r.id = o.run_id
      WHERE o.recipient = ANY(%(addresses)s) AND o.status IN ('sending', 'sent', 'uncertain')
        AND (o.created_at > %(since)s OR o.sent_at > %(since)s)
        AND {scope})"""


@dataclass
class Started:
    """An episode marked running, with what it reads. `episode` is None when the picked episode could not
    start (`blocked`: the run has ended, or it failed too often); None from `start` means nothing is due."""

    run: Run
    episode: Episode | None
    blocked: Episode | None
    contacts: list[Contact]
    tasks: list[Task]
    facts: EpisodeFacts | None


def start(run: Run, *, epoch: int) -> Started | None:
    """Pick and start the run's next episode; `run` is the row the claim or fence returned (children attached).
    Call in that transaction."""
    contacts = json_rows.instances(Contact, run.contact_rows)
    now = clock.now(run)
    params = _params(run, contacts, now=now)
    params.update(epoch=epoch, open=run.is_open, max_attempts=settings.LUCIA_EPISODE_MAX_ATTEMPTS,
                  wall=clock.wall_now())
    sql = (f"WITH {PICK_SQL}\nSELECT (SELECT id FROM candidate) AS candidate_id,"  # noqa: S608 (constants)
           " (SELECT row_to_json(s) FROM started s) AS episode, EXISTS (SELECT 1 FROM activated) AS activated"
           + _facts_sql(run, plan=run.plan))
    row = _fetch(sql, params)
    if row["candidate_id"] is None:
        return None
    if row["episode"] is None:
        return Started(run=run, episode=None, blocked=Episode.objects.get(pk=row["candidate_id"]),
                       contacts=contacts, tasks=[], facts=None)
    if row["activated"]:
        # The statement woke the run (waiting → active); the row in hand says so too.
        run.activate()
        run.wake_when = None
    episode = json_rows.instance(Episode, row["episode"])
    return Started(run=run, episode=episode, blocked=None, contacts=contacts,
                   tasks=json_rows.instances(Task, row["tasks"]), facts=_facts(row, run=run, episode=episode))


def facts_for(run: Run, episode: Episode | None, contacts: list[Contact], *, plan: dict) -> EpisodeFacts:
    """The facts of an episode already running under `plan`, read now (one statement). Without an episode (a
    context outside any, e.g. reviewing an edited draft, runs.approvals) the whole run's history counts."""
    params = _params(run, contacts, now=clock.now(run))
    params.update(episode=episode.pk if episode else None, seq=episode.seq if episode else UNBOUNDED_SEQ)
    sql = ("WITH candidate AS (SELECT %(episode)s::bigint AS id, %(seq)s::integer AS seq)\nSELECT"
           + _facts_sql(run, plan=plan).removeprefix(","))
    return _facts(_fetch(sql, params), run=run, episode=episode)


def _params(run: Run, contacts: list[Contact], *, now: datetime) -> dict:
    known = {addresses.normalize(channel, value) for contact in contacts for channel, value in (
        ("email", contact.email), ("sms", contact.phone), ("slack", contact.slack_user))}
    return {"run": run.pk, "org": run.organization_id, "now": now, "history": HISTORY_ENTRIES,
            "addresses": sorted(known - {""}), "since": now - CAPS_LOOKBACK}


def _facts_sql(run: Run, *, plan: dict) -> str:
    caps = "NULL::json"
    if _has_caps(plan):
        scope = "o.run_id = %(run)s" if run.sim else "r.organization_id = %(org)s AND NOT r.sim"
        caps = CAPS_SQL.replace("{scope}", scope)
    return "," + FACTS_SQL.replace("{caps}", caps)


def _has_caps(plan: dict) -> bool:
    caps = (plan.get("compliance") or {}).get("per_contact_caps") or {}
    return any(caps.get(name) for name in ("per_day", "per_week"))


def _fetch(sql: str, params: dict) -> dict:
    with statements.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))


def _facts(row: dict, *, run: Run, episode: Episode | None) -> EpisodeFacts:
    rows = json_rows.instances(OutboxMessage, row["outbox"])
    sends = None
    if row["sends"] is not None:
        sends = {}
        for recipient, created_at, sent_at in row["sends"]:
            sends.setdefault(recipient, []).append((json_rows.datetime_of(created_at), json_rows.datetime_of(sent_at)))
    return EpisodeFacts(
        outbox_by_key={message.idem_key: message for message in rows if episode and message.episode_id == episode.pk},
        unsettled=[message for message in rows if message.status in ("pending", "sending")],
        first_entry_at=row["first_entry_at"],
        human_answers=[(answer["seq"], answer["payload"] or {}) for answer in row["human_answers"]],
        messages=row["messages"],
        inbound_headers={int(key): value or {} for key, value in row["inbound_headers"].items()},
        history=[{**entry, "at": json_rows.datetime_of(entry["at"])} for entry in row["history"]],
        identities=json_rows.instances(Identity, row["identities"]),
        suppressed={(channel, address) for channel, address in row["suppressions"]},
        handed_off=row["handed_off"],
        sends_by_recipient=sends,
    )
