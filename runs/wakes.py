"""Moving a run's next wake by hand (Studio operations): wake it now, or reschedule its next contact.

Only queued episodes move, and only while no worker holds a live lease on the
run: the run row is locked and its lease checked on the database clock first,
so nothing is written under another worker's lease (a worker that claims next
waits for this transaction and then sees the new due time). The dispatcher
picks a run woken here on its next pass, as any due run. Each move is journaled
with who made it.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now

from runs import clock, events, journal
from runs.models import Episode, EpisodeKind, EpisodeStatus, JournalKind, Run


class CannotMove(Exception):
    """The run's wake cannot be moved now; the message says why and what to do instead."""


def wake_now(run: Run, *, by_user) -> Episode:
    """Make the run's next queued episode due now; returns it. Raises CannotMove or events.RunEnded."""
    with transaction.atomic():
        locked = _lock_idle(run.pk)
        now = clock.now(locked)
        episode = locked.episodes.filter(status=EpisodeStatus.QUEUED).order_by("due_at", "seq").first()
        if episode is None:
            raise CannotMove(f"run {locked.pk} has nothing scheduled to wake for; post an event to give it "
                             "something to do")
        was_due = episode.due_at
        if was_due > now:
            Episode.objects.filter(pk=episode.pk).update(due_at=now)
            episode.due_at = now
        _refresh_next_wake(locked)
        _journal(locked, by_user, at=now, operation="wake_now", episode=episode,
                 text=f"woken now by {_name(by_user)}: episode #{episode.seq} was due {was_due.isoformat()}")
    return episode


def reschedule_next_contact(run: Run, *, at: datetime, by_user) -> Episode:
    """Move the run's next follow-up (its next contact) to `at`; returns it. Raises CannotMove or RunEnded."""
    with transaction.atomic():
        locked = _lock_idle(run.pk)
        now = clock.now(locked)
        if at <= now:
            raise CannotMove(f"{at.isoformat()} has passed; choose a later time, or use Wake now to act now")
        episode = (locked.episodes.filter(status=EpisodeStatus.QUEUED, kind=EpisodeKind.FOLLOWUP)
                   .order_by("due_at", "seq").first())
        if episode is None:
            raise CannotMove(f"run {locked.pk} has no follow-up scheduled; post an event or wake it instead")
        was_due = episode.due_at
        Episode.objects.filter(pk=episode.pk).update(due_at=at)
        episode.due_at = at
        _refresh_next_wake(locked)
        _journal(locked, by_user, at=now, operation="reschedule_next_contact", episode=episode,
                 text=f"next contact moved by {_name(by_user)} from {was_due.isoformat()} to {at.isoformat()}")
    return episode


def _lock_idle(run_id: int) -> Run:
    """The run row, locked, when it is open, real and not leased by a live worker; raises otherwise."""
    leased = ExpressionWrapper(Q(lease_owner__isnull=False, lease_expires_at__gte=Now()), output_field=BooleanField())
    locked = Run.objects.select_for_update(no_key=True).annotate(leased=leased).get(pk=run_id)
    if not locked.is_open:
        raise events.RunEnded(f"run {locked.pk} is {locked.status}")
    if locked.sim:
        raise CannotMove(f"run {locked.pk} is simulated: the simulator moves its clock")
    if locked.leased:
        raise CannotMove(f"run {locked.pk} is being advanced by {locked.lease_owner} (lease until "
                         f"{locked.lease_expires_at.isoformat()}); try again when its episode ends")
    return locked


def _refresh_next_wake(run: Run) -> None:
    run.next_wake_at = events.earliest_due(run.pk)
    run.save(update_fields=["next_wake_at", "updated_at"])


def _journal(run: Run, by_user, *, at: datetime, operation: str, episode: Episode, text: str) -> None:
    journal.write(run, [journal.Entry(episode_id=None, kind=JournalKind.NOTE, at=at, data={
        "operation": operation, "text": text, "episode_seq": episode.seq, "due_at": episode.due_at.isoformat(),
        "by": {"user_id": getattr(by_user, "pk", None), "via": "admin"},
    })])


def _name(user) -> str:
    return getattr(user, "get_username", lambda: "")() or "a person"
