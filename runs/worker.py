"""advance_run: claim a run's lease, drain its due episodes in order, release.

A duplicate delivery is harmless: it finds the lease held (claim returns None)
or nothing due, and returns False.
"""

import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db.models import Q

from runs import clock, execution, leases, queue
from runs.models import Episode, EpisodeStatus, Run

logger = logging.getLogger(__name__)


def advance_run(run_id: int, *, owner: str | None = None, heartbeat_interval: float | None = None) -> bool:
    """Execute the run's due episodes (up to LUCIA_SLICE_STEP_CAP episodes, or until the slice's time budget
    is spent: a share of django-q2's timeout). Returns whether any episode ran; what is left is queued again."""
    owner = owner or default_owner()
    queue.mark_started(run_id)  # before the drain reads what is due: a later enqueue queues a new task
    epoch = leases.claim(run_id, owner=owner)
    if epoch is None:
        logger.debug("run %s: lease held elsewhere", run_id)
        return False
    ran, sim = 0, False
    try:
        with leases.Heartbeat(run_id, epoch=epoch, interval=heartbeat_interval) as heartbeat:
            ran, sim = _drain(run_id, epoch=epoch, heartbeat=heartbeat)
    except leases.LeaseLost as lost:
        # Another worker owns the run now; it resumes whatever this one left running.
        logger.warning("run %s: stopped, %s", run_id, lost)
        return ran > 0
    finally:
        # Conditioned on the epoch: never frees a lease someone else took.
        leases.release(run_id, epoch=epoch)
    if not sim:  # the simulator, not the queue, drives simulated runs (queue.enqueue_advance skips them)
        _requeue_if_due(run_id)
    return ran > 0


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


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


def _drain(run_id: int, *, epoch: int, heartbeat: leases.Heartbeat) -> tuple[int, bool]:
    """(episodes run, whether the run is simulated)."""
    ran = 0
    deadline = time.monotonic() + queue.slice_seconds()
    # What the loop needs of the run: whether it is open and its clock. Read once, then taken from each
    # episode's closing fence (the row as it committed it); a simulation moves its clock only between slices.
    run: Run | None = Run.objects.only("status", "sim", "virtual_now").get(pk=run_id)
    sim = run.sim
    while ran < settings.LUCIA_SLICE_STEP_CAP and (ran == 0 or time.monotonic() < deadline):
        heartbeat.check()
        if run is None:  # the episode was not runnable: read again, the run may have ended meanwhile
            run = Run.objects.only("status", "sim", "virtual_now").get(pk=run_id)
        if not run.is_open:
            break
        episode = next_episode(run, epoch=epoch)
        if episode is None:
            break
        run = execution.execute_episode(run_id, episode.pk, epoch=epoch, heartbeat=heartbeat)
        ran += 1
    return ran, sim


def _requeue_if_due(run_id: int) -> None:
    """Work that arrived while the lease was held (its own enqueue found the lease taken), or the cap was hit."""
    run = Run.objects.get(pk=run_id)
    if run.is_open and next_episode(run, epoch=run.lease_epoch + 1) is not None:
        queue.enqueue_advance(run)
