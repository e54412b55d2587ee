"""advance_run: claim a run's lease, drain its due episodes in order, release.

A duplicate delivery is harmless: it finds the lease held (claim returns None)
or nothing due, and returns False.
"""

import logging
import os
import secrets
import socket
import threading
import time

from django.conf import settings
from django.db.models import Q

from runs import clock, episode_loads, execution, lease_renewals, leases, queue
from runs.models import Episode, EpisodeStatus, Run

logger = logging.getLogger(__name__)


def advance_run(run_id: int, *, owner: str | None = None, heartbeat_interval: float | None = None) -> bool:
    """Execute the run's due episodes (up to LUCIA_SLICE_STEP_CAP episodes, or until the slice's time budget
    is spent: a share of django-q2's timeout). Returns whether any episode ran; what is left is queued again."""
    owner = owner or default_owner()
    # One statement claims the lease (clearing the queue mark: a later enqueue queues a new task) and starts
    # the first due episode with everything it reads (runs.episode_loads).
    start = episode_loads.claim_and_start(run_id, owner=owner)
    run = start.run
    if run is None:
        queue.mark_started(run_id)
        logger.debug("run %s: lease held elsewhere", run_id)
        return False
    epoch = run.lease_epoch
    ran, released = 0, False
    try:
        started = execution.start_next(start, epoch=epoch, owner=owner)
        with _heartbeat(run, epoch=epoch, owner=owner, interval=heartbeat_interval) as heartbeat:
            ran, released = _drain(run_id, started, epoch=epoch, owner=owner, heartbeat=heartbeat)
    except leases.LeaseLost as lost:
        # Another worker owns the run now; it resumes whatever this one left running.
        logger.warning("run %s: stopped, %s", run_id, lost)
        return ran > 0
    finally:
        if not released:
            # Conditioned on the epoch and the owner: never frees a lease someone else took.
            leases.release(run_id, epoch=epoch, owner=owner)
    if not released and not run.sim:  # the simulator, not the queue, drives simulated runs
        _requeue_if_due(run_id)
    return ran > 0


def default_owner() -> str:
    """`host:pid:thread:token`: the token (new for each call) keeps two claims apart even where hosts share a name
    (runs.leases checks the owner beside the epoch)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{secrets.token_hex(4)}"


def next_episode(run: Run, *, epoch: int) -> Episode | None:
    """An episode left running under an older epoch first (resume), then the first due queued one by seq."""
    return (
        Episode.objects.filter(run_id=run.pk)
        .filter(
            Q(status=EpisodeStatus.RUNNING, lease_epoch__lt=epoch)
            | Q(status=EpisodeStatus.QUEUED, due_at__lte=clock.now(run))
        )
        .order_by("-status", "seq")  # "running" sorts after "queued": descending puts resumes first
        .first()
    )


def _drain(run_id: int, started: episode_loads.Started | None, *, epoch: int, owner: str,
           heartbeat: "lease_renewals.Heartbeat | _Unwatched") -> tuple[int, bool]:
    """Run `started`, then the next due episodes while the slice lasts. Returns how many ran, and whether the
    last one's closing write released the lease (nothing else was due: no release or requeue left to do)."""
    ran = 0
    deadline = time.monotonic() + queue.slice_seconds()
    while started is not None:
        run, released = execution.execute(started, epoch=epoch, heartbeat=heartbeat, owner=owner)
        ran += 1
        if released:
            return ran, True
        if not run.is_open or ran >= settings.LUCIA_SLICE_STEP_CAP or time.monotonic() >= deadline:
            break
        heartbeat.check()
        start = episode_loads.hold_and_start(run_id, epoch=epoch, owner=owner)
        if start.run is None:
            raise leases.LeaseLost(f"run {run_id}: the lease moved on from epoch {epoch}")
        started = execution.start_next(start, epoch=epoch, owner=owner)
    return ran, False


def _requeue_if_due(run_id: int) -> None:
    """Work that arrived while the lease was held (its own enqueue found the lease taken), or the cap was hit."""
    # Only what the check reads (the plan, inputs and state stay in the database: JSON, decoded for nothing).
    run = Run.objects.only("status", "sim", "virtual_now", "lease_epoch").get(pk=run_id)
    if run.is_open and next_episode(run, epoch=run.lease_epoch + 1) is not None:
        queue.enqueue_advance(run)


class _Unwatched:
    """A simulated run's stand-in for lease_renewals.Heartbeat: no thread, no renewals (virtual time needs none).

    Only its simulator advances a simulated run (the queue, the dispatcher and the reaper leave it alone), so a
    lease that ran out during a long step is taken by nobody; each fenced write extends it anyway, and the
    fence's epoch check stands as for any run."""

    def __enter__(self) -> "_Unwatched":
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def check(self) -> None:
        return None


def _heartbeat(run: Run, *, epoch: int, owner: str, interval: float | None) -> lease_renewals.Heartbeat | _Unwatched:
    return _Unwatched() if run.sim else lease_renewals.Heartbeat(run.pk, epoch=epoch, owner=owner, interval=interval)
