"""Execute one episode under a lease: start (with its reads) → agent loop → decide what follows → close.

The episode's round trips (DESIGN §10; tests/runs/test_episode_queries.py counts them):
1. start (runs.episode_loads, `start_next`): one statement takes or keeps the lease, picks the episode, marks it
   running and reads what it needs (→ ctx.facts), committed without waiting for the disk (episode_loads.CLOCK_SQL);
2. the agent loop, no transaction: the model, then per new send one fenced statement (the pending journal
   entries and the outbox row, runs.outbox.open_row, which confirms the lease for the provider call that follows:
   runs.tool_executor._confirm_lease) and the provider call;
3. close (`execute`'s last fence): one statement writes the pending entries, the sends' results and the
   episode's end; the decision reads once (runs.decisions.read_standing), and the closing write (`_close`) saves
   in one statement the episodes it schedules, the run, and the lease's release when nothing else is due; the
   COMMIT of a quiet close does not wait for the disk (CLOSE_SQL).
   These stay one transaction: a statement's snapshot is taken before it waits for a lock, so an autocommit
   closing write could miss an event committed while it waited, release the lease and strand that episode; the
   episode's end would commit apart from its decision; and two commits wait for two WAL flushes, not one.
   Its BEGIN and COMMIT are round trips of their own. psycopg's pipeline mode cannot take the BEGIN along (it
   syncs right after queueing it, to know the transaction's state); it can send the decision's read right behind
   the fence's statement, one round trip of five, but against the local server of `make bench` that measured 1-2%
   less wall per episode (issue 13, stop 22; in one process, alternating blocks of 40 start episodes) for a read
   threaded through the fence: not kept. Over a network with a longer round trip the balance differs.
A worker that lost its lease gets LeaseLost from the next fence and has written nothing there.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from connectors import commits
from runs import (
    clock,
    decisions,
    episode_loads,
    escalations,
    events,
    lease_renewals,
    leases,
    model_outages,
    outbox,
    statements,
)
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Episode, EpisodeStatus, EscalationKind, Run, RunStatus

logger = logging.getLogger(__name__)

RETRY_BACKOFF = timedelta(seconds=60)


def start_next(start: episode_loads.Start, *, epoch: int, owner: str | None = None) -> episode_loads.Started | None:
    """The episode a start statement (runs.episode_loads) started; None when nothing is due.

    An episode that cannot run is settled on the way, under the fence: dropped when the run has ended, failed
    with a `stuck` escalation when it failed LUCIA_EPISODE_MAX_ATTEMPTS times (then the next one is started).
    """
    while start.started is not None and start.started.episode is None:
        blocked = start.started.blocked
        run_id = start.run.pk
        # A resumed episode out of attempts, or any episode of an ended run, is settled here. Anything else was
        # changed by another writer after the statement picked it (a reply cancelled this follow-up, a human moved
        # it): nothing to settle, look again.
        if blocked.status == EpisodeStatus.RUNNING or (blocked.status == EpisodeStatus.QUEUED
                                                       and not start.run.is_open):
            with leases.fence(run_id, epoch=epoch, owner=owner, with_children=True) as run:
                if not run.is_open:
                    _drop(run, blocked)
                    return None
                give_up(run, blocked, error=blocked.error or "the worker running it stopped (lease lost or crashed)")
        start = episode_loads.hold_and_start(run_id, epoch=epoch, owner=owner)
        if start.run is None:
            raise leases.LeaseLost(f"run {run_id}: the lease moved on from epoch {epoch}")
    return start.started


def execute(started: episode_loads.Started, *, epoch: int, heartbeat: lease_renewals.Heartbeat | None,
            owner: str | None = None) -> tuple[Run, bool]:
    """Run a started episode to its end. Returns the run row as the episode's last fenced write left it (the
    worker reads its status from there), and whether that write released the lease (nothing else was due).

    An exception from the loop requeues the episode (with a backoff) or, past
    LUCIA_EPISODE_MAX_ATTEMPTS, fails it with a `stuck` escalation. LeaseLost propagates.
    """
    run, episode = started.run, started.episode
    ctx = EpisodeContext(
        run_id=run.pk, epoch=epoch, episode=episode, run=run, plan=run.plan, contacts=started.contacts,
        tasks=started.tasks, now=clock.now(run), heartbeat=heartbeat, loaded_facts=started.facts, owner=owner,
    )
    try:
        outcome = run_loop(ctx)
    except leases.LeaseLost:
        raise
    except model_outages.ModelUnavailable as outage:  # the model is down: the episode waits for it, not a human
        return _postpone(ctx, outage)
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
        decision = decisions.apply_outcome(run, episode, outcome) if run.is_open else decisions.Decision()
        released = _close(run, fields=fields + decision.fields, decision=decision, epoch=epoch,
                          unflushed=_quiet(run, recovered=fields))
    return run, released


def _postpone(ctx: EpisodeContext, outage: model_outages.ModelUnavailable) -> tuple[Run, bool]:
    """The episode waits for the model (runs.model_outages): one autocommitted fenced statement writes it all and
    releases the lease when nothing else is due. Unlike the close (module docstring), it can tell when its snapshot
    may have missed an event (the run row changed while it waited for the lock: model_outages.CLOSING_RELEASE);
    then it keeps the lease and the closing write runs again, as one transaction. ctx.episode is the row as it
    stands (see `execute`)."""
    read = ctx.latest or ctx.run
    open_keys = ctx.open_task_keys()
    _, chased = decisions.chase_target(read, tasks=[task for task in ctx.tasks if task.key in open_keys],
                                       contacts=ctx.contacts)
    postponed = model_outages.postponement(read, ctx.episode, error=outage.error,
                                           contact_tz=decisions.chased_timezone(read, contact=chased))
    ctx.pending.append(postponed.entry)
    if postponed.escalates:  # once per run: the escalation is opened under the fence, with the locked row
        with ctx.fence(rider=postponed.rider()) as run:
            released = _close(run, fields=postponed.settle(run), decision=decisions.Decision(), epoch=ctx.epoch)
        return run, released
    run = ctx.write(rider=postponed.closing(read, now=clock.now(read)))
    if run.lease_owner is None:
        return run, True
    # Kept: something else is due, or the statement may have missed a writer that held the run row meanwhile. The
    # closing write again, under the fence: its statement sees every episode committed before the lock was taken.
    with ctx.fence() as run:
        released = _close(run, fields=[], decision=decisions.Decision(), epoch=ctx.epoch)
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
    """Fail the episode for good and ask a human: the run waits for them. A send it left in flight is asked
    about too (runs.outbox.record_abandoned)."""
    episode.fail()
    episode.error = error[:4000]
    episode.finished_at = clock.now(run)
    episode.save(update_fields=["status", "error", "finished_at"])
    if run.is_open:
        outbox.record_abandoned(run, episode, error=f"episode #{episode.seq}, which was sending it, was given up "
                                                    f"({error[:300]})")
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


# The episode's closing write, one statement: the decision's episodes (runs.events.CLOSING_EPISODES_SQL), the run
# fields it changed, `next_wake_at` (the earliest queued episode), and the lease's release when nothing else is due
# now (as the worker would find: worker.next_episode). Under the fence, so an episode or answer recorded meanwhile
# is either seen here or finds the lease free. One text whatever was decided (runs.statements prepares it): each
# field the decision may change is written only when `set_<field>` says so. `due` is kept a sub-select of its own
# (OFFSET 0): pulled up into the assignments, its tests ran once per lease column.
# A quiet close (`unflushed`: see `_quiet`) in the fence's own transaction commits without waiting for its WAL to
# reach the disk (synchronous_commit off until the transaction ends). After a database crash the commits that
# survive are a prefix of the WAL's order, so such a close is lost as if the worker had died just before it: the
# episode is still running under this epoch and the reaper resumes it, or, when the start that took it was lost too
# (episode_loads.CLOCK_SQL), it is queued as before and the next claim takes it; it finds its sends by key (a send's
# row `sending`). Nothing leaves Lucia on the strength of an unflushed close: every send to a provider is preceded by
# a commit of its own that waits, which flushes every commit before it (runs.outbox.open_row). Readers (the API, the
# Studio) may see a quiet close that a crash then takes back, as they may see an episode a worker's crash repeats.
CLOSE_SQL = f"""
WITH {events.CLOSING_EPISODES_SQL}
UPDATE runs_run
   SET state = CASE WHEN %(set_state)s THEN %(state)s::jsonb ELSE state END,
       status = CASE WHEN %(set_status)s THEN %(status)s::varchar ELSE status END,
       wake_when = CASE WHEN %(set_wake_when)s THEN %(wake_when)s::varchar ELSE wake_when END,
       updated_at = %(wall)s,
       next_wake_at = CASE WHEN %(open)s THEN (SELECT min(due_at) FROM queued) END,
       lease_owner = CASE WHEN due.any THEN lease_owner END,
       lease_expires_at = CASE WHEN due.any THEN lease_expires_at END
  FROM (SELECT EXISTS (SELECT 1 FROM queued WHERE due_at <= %(now)s)
               OR EXISTS (SELECT 1 FROM runs_episode
                           WHERE run_id = %(run)s AND status = 'running' AND lease_epoch < %(epoch)s) AS any,
               {commits.UNFLUSHED_CALL} AS unflushed
        OFFSET 0) due
 WHERE id = %(run)s AND lease_epoch = %(epoch)s
RETURNING next_wake_at, lease_owner IS NULL
"""  # noqa: S608 (constants; every value is a parameter)
# The run fields a decision may change (runs.decisions, runs.model_outages.recovered).
CLOSE_FIELDS = ("state", "status", "wake_when")
_CLOSE_FIELDS = tuple((name, Run._meta.get_field(name)) for name in CLOSE_FIELDS)


def _close(run: Run, *, fields: list[str], decision: decisions.Decision, epoch: int, unflushed: bool = False) -> bool:
    """Save `fields` of the locked run and the decision's episodes with next_wake_at, releasing the lease when
    nothing is due; returns whether it was released (the worker then writes nothing more for this run).
    `unflushed`: a quiet close, whose commit need not wait for the disk (CLOSE_SQL)."""
    unknown = set(fields) - set(CLOSE_FIELDS) - {"updated_at", "next_wake_at"}
    if unknown:
        raise ValueError(f"the closing write does not save {sorted(unknown)}")
    params = {"wall": clock.wall_now(), "open": run.is_open, "run": run.pk, "now": clock.now(run), "epoch": epoch,
              # In the fence's own transaction only: a caller's commits as the caller chose.
              "unflushed": unflushed and len(connection.atomic_blocks) == 1,
              **events.closing_params(decision.scheduled, cancel_followups=decision.cancel_followups)}
    for name, field in _CLOSE_FIELDS:
        params[f"set_{name}"] = chosen = name in fields
        # A field the statement leaves as it is goes as NULL, not encoded for nothing (the state is a JSON document).
        # psycopg prepares a text once per set of parameter types, and a NULL's is not the value's: at most 2**3
        # prepared variants of this statement per connection, each planned once.
        params[name] = field.get_db_prep_save(getattr(run, field.attname), connection) if chosen else None
    with statements.cursor() as cursor:
        cursor.execute(CLOSE_SQL, params)
        run.next_wake_at, released = cursor.fetchone()
    if released:
        run.lease_owner = run.lease_expires_at = None
    return released


def _quiet(run: Run, *, recovered: list[str]) -> bool:
    """A close that only moves the run along: it leaves the run open and not waiting for a human, so it opened no
    escalation (runs.escalations.open_escalation puts the run there) and ended nothing, and it ended no model
    outage (`recovered`, model_outages.recovered's fields: that resolves the outage's notice). What a person or
    another system acts on is committed as a close always was; only a quiet close commits unflushed (CLOSE_SQL)."""
    return not recovered and run.status in (RunStatus.ACTIVE, RunStatus.WAITING)


def _finish(now: datetime, episode: Episode) -> leases.Rider:
    """The episode done, as a rider of the closing fence's statement (the row in hand says so too). The episode is
    found by its key, the status test `IS TRUE` (runs.models.episode's indexes say why)."""
    episode.finish()
    episode.finished_at = now
    name = f"episode_done_{leases.tag()}"
    return leases.Rider(sql=f""",
{name} AS (
    UPDATE runs_episode SET status = 'done', finished_at = %({name}_at)s
     WHERE id = %({name}_id)s AND (status = 'running') IS TRUE AND EXISTS (SELECT 1 FROM fenced)
)""", params={f"{name}_at": now, f"{name}_id": episode.pk})  # noqa: S608 (constants; values are parameters)


def _refresh_next_wake(run: Run) -> None:
    run.next_wake_at = events.earliest_due(run.pk) if run.is_open else None
    run.save(update_fields=["next_wake_at", "updated_at"])
