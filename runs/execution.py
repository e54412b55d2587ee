"""Execute one episode under a lease: mark running → agent loop → decide what follows → close.

Each write is a short fenced transaction; the agent loop between them runs
with no lock held (it calls the model and providers). A worker that lost its
lease gets LeaseLost from the next fence and has written nothing there.
"""

import logging
from datetime import timedelta

from django.conf import settings

from runs import clock, decisions, escalations, events, leases, model_outages
from runs.context import EpisodeContext, EpisodeOutcome
from runs.models import Contact, Episode, EpisodeStatus, EscalationKind, Run, RunStatus, Task

logger = logging.getLogger(__name__)

RETRY_BACKOFF = timedelta(seconds=60)


def execute_episode(run_id: int, episode_id: int, *, epoch: int, heartbeat: leases.Heartbeat | None) -> Run | None:
    """Run the episode to its end. Returns the run row as the episode's last fenced write left it (the worker
    reads its status from there); None when the episode was no longer runnable (cancelled, done, run ended).

    An exception from the loop requeues the episode (with a backoff) or, past
    LUCIA_EPISODE_MAX_ATTEMPTS, fails it with a `stuck` escalation. LeaseLost propagates.
    """
    started = _mark_running(run_id, episode_id, epoch=epoch)
    if started is None:
        return None
    run, episode = started
    ctx = _build_context(run, episode, epoch=epoch, heartbeat=heartbeat)
    try:
        outcome = run_loop(ctx)
    except leases.LeaseLost:
        raise
    except model_outages.ModelUnavailable as outage:  # the model is down: the episode waits for it, not a human
        with ctx.fence() as run:
            model_outages.postpone(run, Episode.objects.get(pk=episode_id), error=outage.error)
        return run
    except Exception as exc:  # any loop failure is the episode's, not the worker's
        logger.exception("run %s: episode #%s failed", run_id, episode.seq)
        with ctx.fence() as run:
            retry_or_give_up(run, Episode.objects.get(pk=episode_id), error=f"{type(exc).__name__}: {exc}")
        return run
    # The loop's last journal entries are written by this fence. Only a lease holder changes a running
    # episode (the reaper and cancellation move the epoch first), so ctx.episode is the row as it stands.
    with ctx.fence() as run:
        _finish(run, episode)
        model_outages.recovered(run, episode)
        if run.is_open:
            decisions.apply_outcome(run, episode, outcome)  # saves next_wake_at with the rest
        else:
            _refresh_next_wake(run)
    return run


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


def _mark_running(run_id: int, episode_id: int, *, epoch: int) -> tuple[Run, Episode] | None:
    """(the locked run, the episode now running), or None when it is not runnable."""
    with leases.fence(run_id, epoch=epoch, select_related=("organization",)) as run:
        episode = Episode.objects.get(pk=episode_id, run_id=run_id)
        if not run.is_open:
            _drop(run, episode)
            return None
        if episode.status not in (EpisodeStatus.QUEUED, EpisodeStatus.RUNNING):
            return None
        if episode.status == EpisodeStatus.RUNNING and episode.attempts >= settings.LUCIA_EPISODE_MAX_ATTEMPTS:
            give_up(run, episode, error=episode.error or "the worker running it stopped (lease lost or crashed)")
            return None
        episode.start()
        episode.lease_epoch = epoch
        episode.started_at = clock.now(run)
        episode.save(update_fields=["status", "attempts", "lease_epoch", "started_at"])
        if run.status == RunStatus.WAITING:
            run.activate()
            run.wake_when = None
            run.save(update_fields=["status", "wake_when", "updated_at"])
        return run, episode


def _drop(run: Run, episode: Episode) -> None:
    """An ended run runs nothing more."""
    if episode.status == EpisodeStatus.QUEUED:
        episode.cancel()
        episode.save(update_fields=["status"])
    elif episode.status == EpisodeStatus.RUNNING:
        episode.fail()
        episode.error = f"run {run.status}"
        episode.save(update_fields=["status", "error"])


def _build_context(run: Run, episode: Episode, *, epoch: int, heartbeat: leases.Heartbeat | None) -> EpisodeContext:
    """The loop's context around the run row _mark_running locked (and committed): no second read of it."""
    return EpisodeContext(
        run_id=run.pk, epoch=epoch, episode=episode, run=run, plan=run.plan,
        contacts=list(Contact.objects.filter(run_id=run.pk)), tasks=list(Task.objects.filter(run_id=run.pk)),
        now=clock.now(run), heartbeat=heartbeat,
    )


def _finish(run: Run, episode: Episode) -> None:
    episode.finish()
    episode.finished_at = clock.now(run)
    episode.save(update_fields=["status", "finished_at"])


def _refresh_next_wake(run: Run) -> None:
    run.next_wake_at = events.earliest_due(run.pk) if run.is_open else None
    run.save(update_fields=["next_wake_at", "updated_at"])
