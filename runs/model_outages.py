"""Model outages: a model that is down (429, 5xx, timeouts) postpones the episode, it does not fail the run.

The model layer classifies errors (runs.llm.base.ModelError.retryable; the
OpenAI provider maps 429, 5xx, timeouts and connection errors to retryable).
A retryable failure ends the episode's attempt with nothing sent: the loop
raises ModelUnavailable and the worker calls `postpone` under its fence, then
saves the run with the episode's closing write (runs.execution._close), which
releases the lease when nothing else is due:

- the episode goes back to `queued`, due after a backoff that doubles from
  LUCIA_MODEL_RETRY_SECONDS up to LUCIA_MODEL_RETRY_MAX_SECONDS (a provider's
  Retry-After is honoured within that cap). Its attempt is not counted toward
  LUCIA_EPISODE_MAX_ATTEMPTS: those are for crashes, not for a provider that is down;
- every postponement is journaled (a `note` with the error, the failures so far
  and when the model is asked again);
- once the outage has lasted LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S, one `stuck`
  escalation is opened, at most once per run, as a notice
  (escalations.open_notice): the run does not wait on it, chasing is not
  paused for it, the episode stays due and keeps being retried. Nobody has to
  answer for the run to resume.

The first episode whose model answers again ends the outage (`recovered`): the
outage's escalation is resolved with a note saying how long it lasted, and
the episode's decisions (runs.decisions) go on as usual.

The outage lives in run.state["model_outage"]: `since` (run clock, ISO),
`failures`, `escalation_id`; run.state["model_outage_escalated"] stays true
once the run has had its one escalation.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings

from runs import clock, escalations, journal
from runs.llm.base import ModelError
from runs.models import Episode, EscalationKind, JournalEntry, JournalKind, Run, RunStatus

logger = logging.getLogger(__name__)

STATE_KEY = "model_outage"
ESCALATED_KEY = "model_outage_escalated"
# run.wake_when while the run sleeps until the model is asked again.
WAKE_REASON = "model:outage"


class ModelUnavailable(Exception):
    """The model failed in a way a later attempt may not (429, 5xx, timeout): postpone the episode."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


def backoff(failures: int, *, retry_after: float | None = None) -> timedelta:
    """Wait before asking the model again after `failures` failures in a row: doubling, capped."""
    cap = settings.LUCIA_MODEL_RETRY_MAX_SECONDS
    seconds = min(settings.LUCIA_MODEL_RETRY_SECONDS * 2 ** max(failures - 1, 0), cap)
    return timedelta(seconds=min(max(seconds, retry_after or 0), cap))


def postpone(run: Run, episode: Episode, *, error: ModelError) -> list[str]:
    """Requeue the running episode for after the backoff, journal it, escalate once a long outage; under the
    fence (`run` is the locked row). Returns the run fields it changed, for the closing write to save with
    next_wake_at (runs.execution._close); `episode.due_at` is when the model is asked again."""
    now = clock.now(run)
    outage = dict(run.state.get(STATE_KEY) or {})
    since = datetime.fromisoformat(outage["since"]) if outage.get("since") else now
    failures = int(outage.get("failures") or 0) + 1
    retry_at = now + backoff(failures, retry_after=error.retry_after)
    episode.requeue()
    episode.attempts = max(episode.attempts - 1, 0)  # the model was down, the episode did not fail
    episode.due_at = retry_at
    episode.error = f"model unavailable: {error.message}"[:4000]
    episode.save(update_fields=["status", "attempts", "due_at", "error"])
    outage.update(since=since.isoformat(), failures=failures, last_error=error.message[:500])
    # Not filed under the episode: its first entry dates a re-execution's prompt ("now") and turns on replay
    # (runs.loop), and a postponement is neither.
    journal.write(run, [journal.Entry(
        episode_id=None, kind=JournalKind.NOTE, at=now,
        data={"runtime": True, "model_outage": True, "episode_seq": episode.seq, "error": error.message[:500],
              "text": f"model unavailable ({error.message[:200]}): episode #{episode.seq} retried at "
                      f"{retry_at:%Y-%m-%d %H:%M} UTC, failure {failures} since {since:%Y-%m-%d %H:%M} UTC",
              "failures": failures, "since": since.isoformat(), "retry_at": retry_at.isoformat()},
    )])
    # The outage's first failure is news; each retry after it is in the journal, and a long outage escalates.
    # A simulated run's outage is a scripted fault, part of its story, not the deployment's.
    logger.log(logging.WARNING if failures == 1 and not run.sim else logging.DEBUG,
               "run %s: model unavailable (%s failures since %s), episode #%s retried at %s",
               run.pk, failures, since, episode.seq, retry_at)
    run.state = {**run.state, STATE_KEY: outage}
    lasted = now - since
    if lasted >= timedelta(seconds=settings.LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S) and not run.state.get(ESCALATED_KEY):
        # A notice, not a question the run waits on: it resumes by itself when the model answers.
        escalation = escalations.open_notice(
            run, kind=EscalationKind.STUCK, episode=episode,
            prompt=(f"The model has been unavailable for {_hours(lasted)} ({error.message[:300]}). The run keeps "
                    f"retrying by itself (next attempt {retry_at:%Y-%m-%d %H:%M} UTC) and resumes when the model "
                    "answers; this question closes then. Check the model provider's status and this "
                    "deployment's model settings, or cancel the run."),
            context={"reason": "model_outage", "since": since.isoformat(), "failures": failures},
        )
        outage["escalation_id"] = escalation.pk
        run.state = {**run.state, STATE_KEY: outage, ESCALATED_KEY: True}
    if run.status == RunStatus.ACTIVE:
        run.sleep()
        run.wake_when = WAKE_REASON
    return ["state", "status", "wake_when"]


def recovered(run: Run, episode: Episode) -> list[str]:
    """End the run's outage if this episode reached the model; under the fence. Returns the run fields it changed
    (["state"] when an outage ended) for the closing write to save (runs.execution._close).

    Costs no query outside an outage."""
    outage = run.state.get(STATE_KEY)
    if not outage:
        return []
    if not JournalEntry.objects.filter(episode_id=episode.pk, kind=JournalKind.MODEL_CALL).exists():
        return []  # a flush or a human send: the model was not asked, the outage may go on
    now = clock.now(run)
    lasted = now - datetime.fromisoformat(outage["since"])
    note = f"The model answered again after {_hours(lasted)} ({outage.get('failures', 0)} failed attempts); " \
           "the run resumed by itself."
    if outage.get("escalation_id"):
        escalations.resolve_by_runtime(outage["escalation_id"], note=note, at=now)
    journal.write(run, [journal.Entry(
        episode_id=episode.pk, kind=JournalKind.NOTE, at=now,
        data={"runtime": True, "model_outage_over": True, "text": note, "lasted_s": int(lasted.total_seconds()),
              "failures": outage.get("failures", 0)},
    )])
    run.state = {key: value for key, value in run.state.items() if key != STATE_KEY}
    return ["state"]


def _hours(lasted: timedelta) -> str:
    minutes = int(lasted.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"

