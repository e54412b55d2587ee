"""Episodes enter a run here: inbound messages, call reports, human answers, API events, follow-ups.

Every insert happens while the run row is locked (`record_event` locks it for a
moment; `schedule_episode` runs under the worker's lease fence, which holds the
same lock), so `seq` is gap-free per run and a duplicate `dedupe_key` is found
before the insert rather than by a failed one.
"""

import json
from datetime import datetime

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from runs import clock, policy, queue
from runs.models import Episode, EpisodeKind, EpisodeStatus, Escalation, EscalationStatus, Run, RunStatus

# The follow-up policy's name for each episode kind: inbound messages and call reports are the contact replying.
POLICY_EVENTS = {
    EpisodeKind.START: "start", EpisodeKind.FOLLOWUP: "followup", EpisodeKind.INBOUND: "reply",
    EpisodeKind.CALL_REPORT: "reply", EpisodeKind.HUMAN_ANSWER: "human_answer", EpisodeKind.EVENT: "event",
}


class RunEnded(Exception):
    """The run is completed, failed or cancelled: it takes no more events (the API answers 409)."""


def record_event(
    run: Run, *, kind: str, payload: dict, dedupe_key: str, due_at: datetime | None = None
) -> Episode | None:
    """Store a trigger for the run and wake it. Returns the new Episode, or None for a duplicate `dedupe_key`.

    Raises RunEnded for an ended run: nothing is stored. A reply cancels any
    queued follow-up; the follow-up policy schedules what comes next after the
    reply's episode (`followup.on_reply`). The enqueue joins the caller's
    transaction, so a rollback leaves neither the episode nor a queue row.
    """
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if not locked.is_open:
            raise RunEnded(f"run {run.pk} is {locked.status}")
        episode = schedule_episode(
            locked, kind=kind, due_at=due_at or clock.now(locked), dedupe_key=dedupe_key, payload=payload
        )
        if episode is None:
            return None
        if policy.cancels_pending_followup(event_for(kind)):
            cancel_pending_followups(locked)
        _wake(locked)
        queue.enqueue_advance(locked)
    return episode


def schedule_episode(run: Run, *, kind: str, due_at: datetime, dedupe_key: str, payload: dict,
                     replace_followups: bool = False) -> Episode | None:
    """Insert a queued episode; the caller holds the run row lock (a fence or record_event). None = duplicate.

    `replace_followups`: the queued follow-ups are cancelled by the same statement (the latest decision wins).
    """
    # One statement, each lookup on its unique index ((run, seq) and (run, dedupe_key)); the lock keeps both still.
    rows = list(Episode.objects.raw(SCHEDULE_SQL, {
        "run": run.pk, "kind": kind, "payload": json.dumps(payload), "dedupe_key": dedupe_key, "due_at": due_at,
        "created_at": timezone.now(), "replace": replace_followups,
    }))
    return rows[0] if rows else None


SCHEDULE_SQL = """
WITH cancelled AS (
    UPDATE runs_episode SET status = 'cancelled'
     WHERE %(replace)s AND run_id = %(run)s AND kind = 'followup' AND status = 'queued'
)
INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, lease_epoch, created_at,
                          started_at, finished_at, error)
SELECT %(run)s, coalesce((SELECT max(seq) FROM runs_episode WHERE run_id = %(run)s), 0) + 1, %(kind)s,
       %(payload)s::jsonb, %(dedupe_key)s, 'queued', %(due_at)s, 0, NULL, %(created_at)s, NULL, NULL, ''
 WHERE NOT EXISTS (SELECT 1 FROM runs_episode WHERE run_id = %(run)s AND dedupe_key = %(dedupe_key)s)
RETURNING *
"""


def cancel_pending_followups(run: Run) -> int:
    """Cancel queued follow-ups (a reply arrived first); returns how many. Caller holds the run row lock."""
    return Episode.objects.filter(
        run_id=run.pk, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED
    ).update(status=EpisodeStatus.CANCELLED)


def event_for(kind: str) -> str:
    return POLICY_EVENTS[kind]


def earliest_due(run_id: int) -> datetime | None:
    return Episode.objects.filter(run_id=run_id, status=EpisodeStatus.QUEUED).aggregate(due=Min("due_at"))["due"]


def has_open_escalation(run_id: int) -> bool:
    return Escalation.objects.filter(run_id=run_id, status=EscalationStatus.OPEN).exists()


def _wake(run: Run) -> None:
    """Point next_wake_at at the earliest queued episode and leave the sleeping states when nothing blocks.

    A run waiting for a human stays so while any escalation is open: a reply is
    still processed, but the human's question is not forgotten.
    """
    fields = ["next_wake_at", "updated_at"]
    run.next_wake_at = earliest_due(run.pk)
    blocked = run.status == RunStatus.WAITING_HUMAN and has_open_escalation(run.pk)
    if run.status != RunStatus.ACTIVE and not blocked:
        run.activate()
        run.wake_when = None
        fields += ["status", "wake_when"]
    run.save(update_fields=fields)
