"""Cancelling a run: it stops at once, even with a worker mid-episode.

The lease epoch is bumped, so a worker still holding the old epoch fails its
next fence and writes nothing more; queued episodes and open questions close.
"""

from django.db import transaction
from django.db.models import F

from agents.models import ApiKey
from runs import clock
from runs.models import Episode, EpisodeStatus, Escalation, EscalationStatus, Run


class RunNotOpen(Exception):
    """The run already ended (completed, failed or cancelled)."""


def cancel_run(run: Run, *, reason: str = "", by_user=None, by_key: ApiKey | None = None) -> Run:
    """Cancel an open run; `by_user`/`by_key` record who asked. Raises RunNotOpen for an ended run."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if not locked.is_open:
            raise RunNotOpen(f"run {locked.pk} is already {locked.status}")
        locked.cancel()
        locked.wake_when = None
        locked.next_wake_at = None
        locked.outcome = reason or "cancelled"
        locked.ended_at = clock.now(locked)
        locked.cancelled_by, locked.cancelled_by_key = by_user, by_key
        locked.save(update_fields=["status", "wake_when", "next_wake_at", "outcome", "ended_at", "cancelled_by",
                                   "cancelled_by_key", "updated_at"])
        Run.objects.filter(pk=locked.pk).update(
            lease_epoch=F("lease_epoch") + 1, lease_owner=None, lease_expires_at=None
        )
        Episode.objects.filter(run=locked, status=EpisodeStatus.QUEUED).update(status=EpisodeStatus.CANCELLED)
        Escalation.objects.filter(run=locked, status=EscalationStatus.OPEN).update(status=EscalationStatus.CANCELLED)
    # FSM fields are protected: a fresh instance instead of refresh_from_db.
    return Run.objects.get(pk=locked.pk)
