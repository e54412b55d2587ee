"""Running a failed episode again (a Studio operation).

A failed episode with its open `stuck` question is retried by answering that
question (runs.answers, option `retry`): one path, the question closes with
the retry. Without one (it was answered otherwise), the episode's trigger is
recorded again as a new episode (runs.events), journaled with who asked.
Either way the run wakes and the dispatcher runs the new episode.
"""

from __future__ import annotations

from django.db import transaction

from runs import answer_options, answers, attention, clock, events, journal
from runs.models import Episode, EpisodeStatus, Escalation, EscalationKind, EscalationStatus, JournalKind, Run


class NotRetryable(Exception):
    """Only a failed episode can be retried."""


def retry_episode(episode: Episode, *, by_user) -> Episode:
    """Queue the failed episode's trigger again; returns the new episode.

    Raises NotRetryable, events.RunEnded (the run ended) or escalations.EscalationClosed (answered meanwhile).
    """
    if episode.status != EpisodeStatus.FAILED:
        raise NotRetryable(f"episode #{episode.seq} is {episode.status}: only a failed episode can be retried")
    if not attention.unrecovered_failures(Episode.objects.filter(pk=episode.pk)).exists():
        raise NotRetryable(f"episode #{episode.seq} was already retried or its run moved on (or ended): "
                           "see the timeline")
    question = _open_question(episode)
    if question is not None:
        answers.answer(question, option="retry", by_user=by_user, via="admin")
        return Episode.objects.get(run_id=episode.run_id, dedupe_key=f"retry:{question.pk}")
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).get(pk=episode.run_id)
        earlier = run.episodes.filter(dedupe_key__startswith=f"retry:episode:{episode.pk}:").count()
        again = events.record_event(run, kind=episode.kind, payload=episode.payload,
                                    dedupe_key=f"retry:episode:{episode.pk}:{earlier + 1}")
        journal.write(run, [journal.Entry(episode_id=None, kind=JournalKind.NOTE, at=clock.now(run), data={
            "operation": "retry_episode", "retry_of_episode": episode.seq, "episode": again.seq,
            "text": f"episode #{episode.seq} retried as #{again.seq}",
            "by": {"user_id": getattr(by_user, "pk", None), "via": "admin"},
        })])
    return again


def _open_question(episode: Episode) -> Escalation | None:
    question = Escalation.objects.filter(episode=episode, kind=EscalationKind.STUCK,
                                         status=EscalationStatus.OPEN).select_related("episode", "run").first()
    if question is None or "retry" not in {option.name for option in answer_options.fitting(question)}:
        return None
    return question
