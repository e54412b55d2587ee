"""Episodes enter a run here: inbound messages, call reports, human answers, API events, follow-ups.

Every insert happens while the run row is locked (`record_event` locks it for a
moment; a decision's episodes, `Planned`, are inserted by the episode's closing
write under the worker's lease fence, which holds the same lock), so `seq` is
gap-free per run and a duplicate `dedupe_key` is found before the insert rather
than by a failed one.
"""

import json
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Min, Q
from django.utils import timezone

from runs import clock, policy, queue, statements
from runs.models import Episode, EpisodeKind, EpisodeStatus, Run

# The follow-up policy's name for each episode kind: inbound messages and call reports are the contact replying.
POLICY_EVENTS = {
    EpisodeKind.START: "start", EpisodeKind.FOLLOWUP: "followup", EpisodeKind.INBOUND: "reply",
    EpisodeKind.CALL_REPORT: "reply", EpisodeKind.HUMAN_ANSWER: "human_answer", EpisodeKind.EVENT: "event",
}


# record_event's lock, with the run's fields it reads: whether it is open (and its status for RECORD_SQL), its
# clock, and whether it is simulated (never queued: runs.queue).
LOCK_SQL = "SELECT id, status, sim, virtual_now FROM runs_run WHERE id = %(run)s FOR NO KEY UPDATE"


class RunEnded(Exception):
    """The run is completed, failed or cancelled: it takes no more events (the API answers 409)."""


def record_event(
    run: Run, *, kind: str, payload: dict, dedupe_key: str, due_at: datetime | None = None
) -> Episode | None:
    """Store a trigger for the run and wake it. Returns the new Episode, or None for a duplicate `dedupe_key`.

    Raises RunEnded for an ended run: nothing is stored. A reply cancels any
    queued follow-up; the follow-up policy schedules what comes next after the
    reply's episode (`followup.on_reply`). Two statements: the run row locked, then RECORD_SQL inserts the
    episode, cancels the follow-ups and wakes the run. The enqueue joins the caller's transaction, so a rollback
    leaves neither the episode nor a queue row.
    """
    episode = None
    # No savepoint: an ended run raises once the block is over, having written nothing.
    with transaction.atomic(savepoint=False):
        # Locked first, by a statement of its own: the next one's snapshot then sees every episode a concurrent
        # delivery inserted before it let go of the row (its seq and its dedupe key).
        # Only what deciding and waking read (LOCK_SQL): the plan, inputs and state are large JSON, decoded for
        # nothing.
        locked_rows = statements.fetch_instances(Run, LOCK_SQL, {"run": run.pk})
        if not locked_rows:
            raise Run.DoesNotExist(f"run {run.pk} does not exist")
        locked = locked_rows[0]
        if locked.is_open:
            rows = statements.fetch_dicts(RECORD_SQL, {
                "run": locked.pk, "kind": kind, "payload": json.dumps(payload), "dedupe_key": dedupe_key,
                "due_at": due_at or clock.now(locked), "created_at": timezone.now(), "status": locked.status,
                "cancel": policy.cancels_pending_followup(event_for(kind)),
            })
            episode = statements.instance(Episode, rows[0]) if rows else None
            if episode is not None:
                queue.enqueue_advance(locked)
    if not locked.is_open:
        raise RunEnded(f"run {run.pk} is {locked.status}")
    return episode


# In these statements a run's episodes are found by run, their status tests `IS TRUE` (runs.models.episode's
# indexes say why).

# record_event's statement, under the run row's lock: the episode inserted as SCHEDULE_SQL would (none when the key is
# taken), then the queued follow-ups cancelled (`cancel`) and the run woken: next_wake_at the earliest queued
# episode, and active unless it waits for a human who has an open escalation (`status` is the locked row's; the
# run's question is not forgotten: a reply is still processed meanwhile).
RECORD_SQL = """
WITH inserted AS (
    INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, lease_epoch,
                              created_at, started_at, finished_at, error)
    SELECT %(run)s, coalesce((SELECT max(seq) FROM runs_episode WHERE run_id = %(run)s), 0) + 1, %(kind)s::varchar,
           %(payload)s::jsonb, %(dedupe_key)s::varchar, 'queued', %(due_at)s, 0, NULL, %(created_at)s, NULL, NULL, ''
     WHERE NOT EXISTS (SELECT 1 FROM runs_episode WHERE run_id = %(run)s AND dedupe_key = %(dedupe_key)s::varchar)
 RETURNING *
),
cancelled AS (
    UPDATE runs_episode SET status = 'cancelled'
     WHERE %(cancel)s AND run_id = %(run)s AND kind = 'followup' AND (status = 'queued') IS TRUE
       AND EXISTS (SELECT 1 FROM inserted)
 RETURNING id
),
woken AS (
    SELECT %(status)s::varchar <> 'active' AND NOT (
               %(status)s::varchar = 'waiting_human'
               AND EXISTS (SELECT 1 FROM runs_escalation x WHERE x.run_id = %(run)s AND x.status = 'open')) AS wakes
),
saved AS (
    UPDATE runs_run
       SET next_wake_at = (SELECT min(q.due_at) FROM (
               SELECT due_at FROM runs_episode
                WHERE run_id = %(run)s AND (status = 'queued') IS TRUE AND id NOT IN (SELECT id FROM cancelled)
                UNION ALL
               SELECT due_at FROM inserted) q),
           status = CASE WHEN woken.wakes THEN 'active' ELSE runs_run.status END,
           wake_when = CASE WHEN woken.wakes THEN NULL ELSE runs_run.wake_when END,
           updated_at = %(created_at)s
      FROM woken
     WHERE runs_run.id = %(run)s AND EXISTS (SELECT 1 FROM inserted)
)
SELECT __EPISODE_COLUMNS__ FROM inserted
"""
# Named, not `*`: a prepared statement whose result changes shape (a migration adds a column) fails until its
# connection closes ("cached plan must not change result type").
RECORD_SQL = RECORD_SQL.replace("__EPISODE_COLUMNS__",
                                ", ".join(field.column for field in Episode._meta.concrete_fields))


def schedule_episode(run: Run, *, kind: str, due_at: datetime, dedupe_key: str, payload: dict) -> Episode | None:
    """Insert a queued episode; the caller holds the run row or created it in its transaction. None = duplicate.
    A run's first episode is inserted with the run (runs.starts), episodes a decision schedules ride on the
    closing write (CLOSING_EPISODES_SQL), an event's on record_event's statement."""
    # One statement, each lookup on its unique index ((run, seq) and (run, dedupe_key)); the lock keeps both still.
    rows = list(Episode.objects.raw(SCHEDULE_SQL, {
        "run": run.pk, "kind": kind, "payload": json.dumps(payload), "dedupe_key": dedupe_key, "due_at": due_at,
        "created_at": timezone.now(),
    }))
    return rows[0] if rows else None


SCHEDULE_SQL = """
INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, lease_epoch, created_at,
                          started_at, finished_at, error)
SELECT %(run)s, coalesce((SELECT max(seq) FROM runs_episode WHERE run_id = %(run)s), 0) + 1, %(kind)s,
       %(payload)s::jsonb, %(dedupe_key)s, 'queued', %(due_at)s, 0, NULL, %(created_at)s, NULL, NULL, ''
 WHERE NOT EXISTS (SELECT 1 FROM runs_episode WHERE run_id = %(run)s AND dedupe_key = %(dedupe_key)s)
RETURNING *
"""


@dataclass(frozen=True)
class Planned:
    """An episode a decision schedules under the fence, inserted by the episode's closing write (runs.execution) as
    schedule_episode would insert it: next seq, nothing when its `dedupe_key` is taken."""

    kind: str
    due_at: datetime
    dedupe_key: str
    payload: dict
    # Not inserted when a queued episode of its kind whose payload holds its own is due by then (a flush episode,
    # runs.decisions).
    unless_queued_by: datetime | None = None


# The closing write's episodes, as CTEs its UPDATE of the run reads (runs.execution.CLOSE_SQL): the queued
# follow-ups cancelled (`cancel_followups`), the planned episodes inserted, and `queued`, the run's queued episodes
# as they stand after both. One statement sees one snapshot, so `queued` is built from what the other two return
# rather than read again. The run row's lock (the fence) keeps every other insert out meanwhile.
# `LIMIT 2` (PLANNED_MAX) is for the planner: it estimates the rows of a parameter's JSON array at 100, so the prepared
# statement's generic plan looked dearer than planning each execution for its one or two rows, and PostgreSQL
# re-planned it every time.
CLOSING_EPISODES_SQL = """
cancelled AS (
    UPDATE runs_episode SET status = 'cancelled'
     WHERE %(cancel_followups)s AND run_id = %(run)s AND kind = 'followup' AND (status = 'queued') IS TRUE
 RETURNING id
),
planned AS (
    SELECT p.kind, p.payload, p.dedupe_key, p.due_at, row_number() OVER (ORDER BY p.n) AS n
      FROM (SELECT (e ->> 'kind')::varchar AS kind, e -> 'payload' AS payload,
                   (e ->> 'dedupe_key')::varchar AS dedupe_key, (e ->> 'due_at')::timestamptz AS due_at,
                   (e ->> 'unless_queued_by')::timestamptz AS unless_queued_by, n
              FROM jsonb_array_elements(%(planned)s::jsonb) WITH ORDINALITY AS p(e, n)
             LIMIT 2) p
     WHERE NOT EXISTS (SELECT 1 FROM runs_episode e WHERE e.run_id = %(run)s AND e.dedupe_key = p.dedupe_key)
       AND (p.unless_queued_by IS NULL
            OR NOT EXISTS (SELECT 1 FROM runs_episode e
                            WHERE e.run_id = %(run)s AND e.kind = p.kind
                              AND (e.status = 'queued' AND e.payload @> p.payload
                                   AND e.due_at <= p.unless_queued_by) IS TRUE))
),
inserted AS (
    INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, lease_epoch,
                              created_at, started_at, finished_at, error)
    SELECT %(run)s, last.seq + p.n, p.kind, p.payload, p.dedupe_key, 'queued', p.due_at, 0, NULL, %(wall)s, NULL,
           NULL, ''
      FROM planned p, (SELECT coalesce(max(seq), 0) AS seq FROM runs_episode WHERE run_id = %(run)s) last
 RETURNING due_at
),
queued AS (
    SELECT due_at FROM runs_episode
     WHERE run_id = %(run)s AND (status = 'queued') IS TRUE AND id NOT IN (SELECT id FROM cancelled)
     UNION ALL
    SELECT due_at FROM inserted
)"""


# The most episodes one decision schedules: the next follow-up and a flush (runs.decisions).
PLANNED_MAX = 2


def closing_params(planned: list[Planned], *, cancel_followups: bool) -> dict:
    """CLOSING_EPISODES_SQL's parameters (besides `run` and `wall`): the same statement text for up to PLANNED_MAX
    planned episodes."""
    if len(planned) > PLANNED_MAX:
        raise ValueError(f"{len(planned)} episodes planned at once; the closing write inserts up to {PLANNED_MAX}")
    # One JSON text, not an array parameter per column: psycopg dumps arrays element by element in Python (about
    # 30 us for five one-element arrays), json.dumps in C.
    return {"cancel_followups": cancel_followups, "planned": json.dumps([
        {"kind": episode.kind, "payload": episode.payload, "dedupe_key": episode.dedupe_key,
         "due_at": episode.due_at.isoformat(),
         "unless_queued_by": episode.unless_queued_by and episode.unless_queued_by.isoformat()}
        for episode in planned])}


def cancel_pending_followups(run: Run) -> int:
    """Cancel queued follow-ups (a reply arrived first); returns how many. Caller holds the run row lock."""
    return Episode.objects.filter(
        run_id=run.pk, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED
    ).update(status=EpisodeStatus.CANCELLED)


def event_for(kind: str) -> str:
    return POLICY_EVENTS[kind]


def earliest_due(run_id: int) -> datetime | None:
    """The run's earliest queued episode's due time: the run's episodes found by run, the queued ones picked by the
    aggregate's filter (runs.models.episode's indexes say why: `WHERE status = 'queued'` could read every run's
    queued episodes off episode_due in due order until one of this run's came up)."""
    return Episode.objects.filter(run_id=run_id).aggregate(
        due=Min("due_at", filter=Q(status=EpisodeStatus.QUEUED)))["due"]

