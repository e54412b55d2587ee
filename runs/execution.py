"""Execute one episode under a lease: start (with its reads) → agent loop → decide what follows → close.

The episode's round trips (DESIGN §10; tests/runs/test_episode_queries.py counts them):
1. start (`start_next`, in the claim's transaction or a fence's): one statement picks the episode, marks it
   running and reads what it needs (runs.episode_loads → ctx.facts);
2. the agent loop, no transaction: the model, then per new send one fenced statement (the pending journal
   entries and the outbox row, runs.outbox.open_row), a lease renewal and the provider call;
3. close (`execute`'s last fence): one statement writes the pending entries, the sends' results and the
   episode's end; the decision reads once (runs.decisions.read_standing), schedules the next episode in one
   statement, and the closing write (`_close`) saves the run and releases the lease when nothing else is due.
A worker that lost its lease gets LeaseLost from the next fence and has written nothing there.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from runs import clock, decisions, episode_loads, escalations, events, leases, model_outages
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Episode, EpisodeStatus, EscalationKind, Run

logger = logging.getLogger(__name__)

RETRY_BACKOFF = timedelta(seconds=60)


def start_next(run: Run, *, epoch: int) -> episode_loads.Started | None:
    """Start the run's next due episode, in the transaction that holds the run row (the claim's or a fence's,
    `run` being the row it returned with its children). None when nothing is due.

    An episode that cannot run is settled on the way: dropped when the run has ended, failed with a `stuck`
    escalation when it failed LUCIA_EPISODE_MAX_ATTEMPTS times (then the next one is tried).
    """
    while True:
        started = episode_loads.start(run, epoch=epoch)
        if started is None or started.episode is not None:
            return started
        if not run.is_open:
            _drop(run, started.blocked)
            return None
        give_up(run, started.blocked,
                error=started.blocked.error or "the worker running it stopped (lease lost or crashed)")


def execute(started: episode_loads.Started, *, epoch: int,
            heartbeat: leases.Heartbeat | None) -> tuple[Run, bool]:
    """Run a started episode to its end. Returns the run row as the episode's last fenced write left it (the
    worker reads its status from there), and whether that write released the lease (nothing else was due).

    An exception from the loop requeues the episode (with a backoff) or, past
    LUCIA_EPISODE_MAX_ATTEMPTS, fails it with a `stuck` escalation. LeaseLost propagates.
    """
    run, episode = started.run, started.episode
    ctx = EpisodeContext(
        run_id=run.pk, epoch=epoch, episode=episode, run=run, plan=run.plan, contacts=started.contacts,
        tasks=started.tasks, now=clock.now(run), heartbeat=heartbeat, loaded_facts=started.facts,
    )
    try:
        outcome = run_loop(ctx)
    except leases.LeaseLost:
        raise
    except model_outages.ModelUnavailable as outage:  # the model is down: the episode waits for it, not a human
        # ctx.episode is the row as it stands (see below); the closing write releases the lease if nothing is due.
        with ctx.fence() as run:
            released = _close(run, fields=model_outages.postpone(run, episode, error=outage.error), epoch=epoch)
        return run, released
    except Exception as exc:  # any loop failure is the episode's, not the worker's
        logger.exception("run %s: episode #%s failed", run.pk, episode.seq)
        with ctx.fence() as run:
            retry_or_give_up(run, Episode.objects.get(pk=episode.pk), error=f"{type(exc).__name__}: {exc}")
        return run, False
    # The loop's last journal entries and its sends' results are written by this fence. Only a lease holder
    # changes a running episode (the reaper and cancellation move the epoch first), so ctx.episode is the row
    # as it stands.
    with ctx.fence(rider=_finish(clock.now(ctx.run), episode)) as run:
        fields = model_outages.recovered(run, episode)
        fields += decisions.apply_outcome(run, episode, outcome) if run.is_open else []
        released = _close(run, fields=fields, epoch=epoch)
    return run, released


def run_loop(ctx: EpisodeContext) -> EpisodeOutcome:
    """The agent loop; imported on use so the runtime does not depend on the model layer at import time.

    A flush episode (runs.decisions.is_flush) only sends the run's held messages, a human send episode
    (runs.human_sends) only the message a human decided: no model call.
    """
    from runs import human_sends, loop, tool_executor

    if decisions.is_flush(ctx.episode):
        tool_executor.flush_pending(ctx)
        return EpisodeOutcome()
    if human_sends.is_human_send(ctx):
        # A message a human decided (send_anyway, reply_to_contact): sent as given, no model call.
        return human_sends.run(ctx)
    return loop.run_episode(ctx, flush=False)


def retry_or_give_up(run: Run, episode: Episode, *, error: str, backoff: bool = True) -> bool:
    """Requeue a running episode, or fail it with a `stuck` escalation past the attempt limit.

    Call under the fence (or a reaper's claim); returns True when requeued.
    """
    episode.error = error[:4000]
    if episode.attempts < settings.LUCIA_EPISODE_MAX_ATTEMPTS:
        episode.requeue()
        if backoff:
            # A failing episode must not spin: later attempts wait longer.
            episode.due_at = clock.now(run) + RETRY_BACKOFF * 2 ** max(episode.attempts - 1, 0)
        episode.save(update_fields=["status", "error", "due_at"])
        _refresh_next_wake(run)
        return True
    give_up(run, episode, error=error)
    return False


def give_up(run: Run, episode: Episode, *, error: str) -> None:
    """Fail the episode for good and ask a human: the run waits for them."""
    episode.fail()
    episode.error = error[:4000]
    episode.finished_at = clock.now(run)
    episode.save(update_fields=["status", "error", "finished_at"])
    if run.is_open:
        escalations.open_escalation(
            run, kind=EscalationKind.STUCK, episode=episode,
            prompt=f"Episode #{episode.seq} ({episode.kind}) failed after {episode.attempts} attempts: {error[:500]}",
        )
    _refresh_next_wake(run)


def _drop(run: Run, episode: Episode) -> None:
    """An ended run runs nothing more."""
    if episode.status == EpisodeStatus.QUEUED:
        episode.cancel()
        episode.save(update_fields=["status"])
    elif episode.status == EpisodeStatus.RUNNING:
        episode.fail()
        episode.error = f"run {run.status}"
        episode.save(update_fields=["status", "error"])


# The episode's closing write: the fields the decision changed, `next_wake_at` (the earliest queued episode), and
# the lease's release when nothing else is due now (as the worker would find: worker.next_episode). Under the
# fence, so an episode or answer recorded meanwhile is either seen here or finds the lease free.
CLOSE_SQL = """
UPDATE runs_run
   SET {fields}updated_at = %(wall)s,
       next_wake_at = CASE WHEN %(open)s THEN (SELECT min(due_at) FROM runs_episode
                                                 WHERE run_id = %(run)s AND status = 'queued') END,
       lease_owner = CASE WHEN due.any THEN lease_owner END,
       lease_expires_at = CASE WHEN due.any THEN lease_expires_at END
  FROM (SELECT EXISTS (SELECT 1 FROM runs_episode
                        WHERE run_id = %(run)s AND ((status = 'queued' AND due_at <= %(now)s)
                                                    OR (status = 'running' AND lease_epoch < %(epoch)s))) AS any) due
 WHERE id = %(run)s AND lease_epoch = %(epoch)s
RETURNING next_wake_at, lease_owner IS NULL
"""


def _close(run: Run, *, fields: list[str], epoch: int) -> bool:
    """Save `fields` of the locked run with next_wake_at, releasing the lease when nothing is due; returns
    whether it was released (the worker then writes nothing more for this run)."""
    params = {"wall": clock.wall_now(), "open": run.is_open, "run": run.pk, "now": clock.now(run), "epoch": epoch}
    assignments = []
    for name in dict.fromkeys(fields):
        if name in ("updated_at", "next_wake_at"):
            continue
        field = Run._meta.get_field(name)
        params[f"f_{name}"] = field.get_db_prep_save(getattr(run, field.attname), connection)
        assignments.append(f'"{field.column}" = %(f_{name})s, ')
    with connection.cursor() as cursor:
        cursor.execute(CLOSE_SQL.replace("{fields}", "".join(assignments)), params)
        run.next_wake_at, released = cursor.fetchone()
    if released:
        run.lease_owner = run.lease_expires_at = None
    return released


def _finish(now: datetime, episode: Episode) -> leases.Rider:
    """The episode done, as a rider of the closing fence's statement (the row in hand says so too)."""
    episode.finish()
    episode.finished_at = now
    name = f"episode_done_{leases.tag()}"
    return leases.Rider(sql=f""",
{name} AS (
    UPDATE runs_episode SET status = 'done', finished_at = %({name}_at)s
     WHERE id = %({name}_id)s AND status = 'running' AND EXISTS (SELECT 1 FROM fenced)
)""", params={f"{name}_at": now, f"{name}_id": episode.pk})  # noqa: S608 (constants; values are parameters)


def _refresh_next_wake(run: Run) -> None:
    run.next_wake_at = events.earliest_due(run.pk) if run.is_open else None
    run.save(update_fields=["next_wake_at", "updated_at"])
