"""Model outages: a model that is down (429, 5xx, timeouts) postpones the episode, it does not fail the run.

The model layer classifies errors (runs.llm.base.ModelError.retryable; the
OpenAI provider maps 429, 5xx, timeouts and connection errors to retryable).
A retryable failure ends the episode's attempt with nothing sent: the loop
raises ModelUnavailable and the worker works out the `postponement` and writes it
in one fenced statement, no transaction (Postponement.closing): the journal note, the
episode requeued, the outage in run.state, the run asleep, next_wake_at, and the
lease's release when nothing else is due, as the episode's closing write
(runs.execution._close) would. The postponement that opens the outage's escalation
(once per run) writes it under the fence instead (Postponement.settle), then closes
as usual:

- the episode goes back to `queued`, due after a backoff that doubles from
  LUCIA_MODEL_RETRY_SECONDS up to LUCIA_MODEL_RETRY_MAX_SECONDS (a provider's
  Retry-After is honoured within that cap). A follow-up's retry waits for the send
  window of the contact it chases, but not past when the outage's notice falls due,
  nor, after it, for longer than that again (`retry_time`). Its attempt is not counted toward
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

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from runs import clock, escalations, journal, leases, policy, statements
from runs.llm.base import ModelError
from runs.models import Episode, EpisodeKind, EscalationKind, JournalKind, Run, RunStatus

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


@dataclass(frozen=True)
class Postponement:
    """An episode's postponement, worked out before its fence from the run row as the episode read it: the run's
    outage (run.state["model_outage"]) is only ever written by its lease holder (`settle`, `recovered`), so that
    row's is the locked row's. The fence's own statement requeues the episode (`rider`) and writes the journal
    note (`entry`, after the episode's pending entries); `settle` does the rest under the fence."""

    episode: Episode
    error: ModelError
    now: datetime
    since: datetime
    failures: int
    retry_at: datetime
    # This postponement opens the run's one escalation (`settle`, under the fence, not `closing`).
    escalates: bool = False

    @property
    def entry(self) -> journal.Entry:
        # Not filed under the episode: its first entry dates a re-execution's prompt ("now") and turns on replay
        # (runs.loop), and a postponement is neither.
        message, since, retry_at = self.error.message, self.since, self.retry_at
        return journal.Entry(
            episode_id=None, kind=JournalKind.NOTE, at=self.now,
            data={"runtime": True, "model_outage": True, "episode_seq": self.episode.seq, "error": message[:500],
                  "text": f"model unavailable ({message[:200]}): episode #{self.episode.seq} retried at "
                          f"{retry_at:%Y-%m-%d %H:%M} UTC, failure {self.failures} since {since:%Y-%m-%d %H:%M} UTC",
                  "failures": self.failures, "since": since.isoformat(), "retry_at": retry_at.isoformat()},
        )

    def rider(self) -> leases.Rider:
        """The episode back to `queued`, due at retry_at, in the fence's own statement (the row in hand too).
        Its attempt is not counted: the model was down, the episode did not fail. Found by its key, as
        runs.execution._finish's."""
        episode = self.episode
        episode.requeue()
        episode.attempts = max(episode.attempts - 1, 0)
        episode.due_at = self.retry_at
        episode.error = f"model unavailable: {self.error.message}"[:4000]
        name = f"episode_postponed_{leases.tag()}"
        return leases.Rider(sql=f""",
{name} AS (
    UPDATE runs_episode SET status = 'queued', attempts = %({name}_attempts)s, due_at = %({name}_due_at)s,
                            error = %({name}_error)s
     WHERE id = %({name}_id)s AND (status = 'running') IS TRUE AND EXISTS (SELECT 1 FROM fenced)
)""", params={f"{name}_attempts": episode.attempts, f"{name}_due_at": episode.due_at,  # noqa: S608 (constants)
              f"{name}_error": episode.error, f"{name}_id": episode.pk})

    def closing(self, run: Run, *, now: datetime) -> leases.Rider:
        """The whole postponement as the fence's own statement, autocommitted (`run`: the row the episode read):
        `rider`, and the run row as `settle` and the episode's closing write (runs.execution._close) leave it, with
        the lease released when nothing else is due at `now` (the run's clock). Only for a postponement that does
        not escalate.

        Read the lease's release from the row it returns (`lease_owner` None). Kept instead: something is due, or
        the run row changed after the statement's snapshot was taken (another writer held it meanwhile:
        CLOSING_RELEASE); then the caller closes again from a fresh snapshot, under the fence (runs.execution)."""
        self.log(run)
        outage = {"since": self.since.isoformat(), "failures": self.failures, "last_error": self.error.message[:500]}
        return self.rider() + leases.Rider(
            run_sets=CLOSING_SETS, release_when=CLOSING_RELEASE,
            params={"outage": json.dumps(outage), "outage_wake": WAKE_REASON, "outage_retry_at": self.retry_at,
                    "outage_now": now, "outage_wall": clock.wall_now()})

    def log(self, run: Run) -> None:
        # The outage's first failure is news; each retry after it is in the journal, and a long outage escalates.
        # A simulated run's outage is a scripted fault, part of its story, not the deployment's.
        logger.log(logging.WARNING if self.failures == 1 and not run.sim else logging.DEBUG,
                   "run %s: model unavailable (%s failures since %s), episode #%s retried at %s",
                   run.pk, self.failures, self.since, self.episode.seq, self.retry_at)

    def settle(self, run: Run) -> list[str]:
        """Under the fence (`run` is the locked row): the outage in run.state, one escalation once it has lasted,
        the run asleep. Returns the run fields it changed, for the closing write to save with next_wake_at
        (runs.execution._close)."""
        now, since, failures, retry_at, error = self.now, self.since, self.failures, self.retry_at, self.error
        self.log(run)
        outage = {**(run.state.get(STATE_KEY) or {}), "since": since.isoformat(), "failures": failures,
                  "last_error": error.message[:500]}
        run.state = {**run.state, STATE_KEY: outage}
        lasted = now - since
        if (lasted >= timedelta(seconds=settings.LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S)
                and not run.state.get(ESCALATED_KEY)):
            # A notice, not a question the run waits on: it resumes by itself when the model answers.
            escalation = escalations.open_notice(
                run, kind=EscalationKind.STUCK, episode=self.episode,
                prompt=(f"The model has been unavailable for {_hours(lasted)} ({error.message[:300]}). The run "
                        f"keeps retrying by itself (next attempt {retry_at:%Y-%m-%d %H:%M} UTC) and resumes when "
                        "the model answers; this question closes then. Check the model provider's status and this "
                        "deployment's model settings, or cancel the run."),
                context={"reason": "model_outage", "since": since.isoformat(), "failures": failures},
            )
            outage["escalation_id"] = escalation.pk
            run.state = {**run.state, STATE_KEY: outage, ESCALATED_KEY: True}
        if run.status == RunStatus.ACTIVE:
            run.sleep()
            run.wake_when = WAKE_REASON
        return ["state", "status", "wake_when"]


# The run row as a postponement's closing write leaves it (Postponement.closing: the fence's own UPDATE, `runs_run`
# the row as it stands once locked): settle's outage and sleep, and runs.execution.CLOSE_SQL's updated_at and
# next_wake_at, the postponed episode counted at its retry (the statement's snapshot still has it running).
# The run's episodes are found by run, the queued ones by the aggregate's FILTER and the release's test `IS TRUE`
# (runs.models.episode's indexes say why).
CLOSING_SETS = """,
 state = runs_run.state || jsonb_build_object('model_outage', CASE WHEN jsonb_typeof(runs_run.state -> 'model_outage')
   = 'object' THEN runs_run.state -> 'model_outage' ELSE '{}'::jsonb END || %(outage)s::jsonb),
 status = CASE WHEN runs_run.status = 'active' THEN 'waiting' ELSE runs_run.status END,
 wake_when = CASE WHEN runs_run.status = 'active' THEN %(outage_wake)s::varchar ELSE runs_run.wake_when END,
 updated_at = %(outage_wall)s,
 next_wake_at = CASE WHEN runs_run.status IN ('active', 'waiting', 'waiting_human') THEN least(%(outage_retry_at)s,
   (SELECT min(e.due_at) FILTER (WHERE e.status = 'queued') FROM runs_episode e WHERE e.run_id = %(run_id)s)) END"""
# CLOSE_SQL's release: nothing else due now and no episode left running under an older epoch, as this statement's
# snapshot has them. That snapshot is taken before the UPDATE waits for the row's lock, so a writer that held the
# row meanwhile (an event recording its episode) committed rows it cannot see; every such writer updates the run
# row (runs.events.RECORD_SQL, the reaper, runs.wakes, cancellation moves the epoch), so a row whose version
# (xmin) is not the snapshot's keeps the lease, and the caller closes again from a fresh snapshot.
# (Both texts are kept short: psycopg caches the parsing of a statement up to 4096 characters.)
CLOSING_RELEASE = """runs_run.xmin = (SELECT r.xmin FROM runs_run r WHERE r.id = %(run_id)s)
 AND %(outage_retry_at)s > %(outage_now)s AND NOT EXISTS (SELECT 1 FROM runs_episode e WHERE e.run_id = %(run_id)s
   AND ((e.status = 'queued' AND e.due_at <= %(outage_now)s)
        OR (e.status = 'running' AND e.lease_epoch < %(epoch)s)) IS TRUE)"""


def postponement(run: Run, episode: Episode, *, error: ModelError, contact_tz: str) -> Postponement:
    """Requeue the running episode for after the backoff, journal it, escalate once a long outage: what to write,
    from the run row the episode read (see Postponement). `episode.due_at` becomes when the model is asked again
    (`retry_at`; `contact_tz`: the timezone of the contact the run chases, runs.decisions.chase_target).

        postponed = model_outages.postponement(run, episode, error=error, contact_tz=contact_tz)
        ctx.pending.append(postponed.entry)
        if not postponed.escalates:
            run = ctx.write(rider=postponed.closing(run, now=clock.now(run)))
        else:
            with ctx.fence(rider=postponed.rider()) as locked:
                fields = postponed.settle(locked)
    """
    now = clock.now(run)
    outage = run.state.get(STATE_KEY) or {}
    since = datetime.fromisoformat(outage["since"]) if outage.get("since") else now
    failures = int(outage.get("failures") or 0) + 1
    escalates = (now - since >= timedelta(seconds=settings.LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S)
                 and not run.state.get(ESCALATED_KEY))
    # A follow-up's retry in the send window is not later than when the outage's notice falls due nor, once the
    # run has had it, later than as long again from now: the notice closes at most that long after the model is back.
    notice_span = timedelta(seconds=settings.LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S)
    notified = escalates or bool(run.state.get(ESCALATED_KEY))
    retry_at = retry_time(run, episode, at=now + backoff(failures, retry_after=error.retry_after),
                          latest=(now if notified else since) + notice_span, contact_tz=contact_tz)
    return Postponement(episode=episode, error=error, now=now, since=since, failures=failures, retry_at=retry_at,
                        escalates=bool(escalates))


def retry_time(run: Run, episode: Episode, *, at: datetime, latest: datetime, contact_tz: str) -> datetime:
    """When a postponed episode asks the model again: `at`, after the backoff.

    A follow-up waits for the send window of the contact it chases (runs.policy.window; `contact_tz` is theirs):
    asked before the window opens, it could only hold what it writes until then. So an outage through the night
    or a weekend is not retried every hour of it, and the follow-up decides on the facts of the morning. But not
    past `latest`: a human hears of a long outage on time, night or day, and its notice (closed by the first
    episode that reaches the model again: `recovered`) does not stay open all weekend after the model is back.
    Any other episode is asked again at `at`, whatever the hour: what a reply or a human's answer settles may not
    wait for the window (a dispute stops the chase at once), and whoever started a run is waiting to see it begin."""
    if episode.kind != EpisodeKind.FOLLOWUP:
        return at
    tz = policy.resolve_timezone(run.plan, contact_tz=contact_tz, org_tz=run.organization.default_timezone)
    opens = policy.next_allowed_instant(run.plan, at=at, tz=tz, run_id=run.offset_key)
    return min(opens, max(at, latest))


def recovered(run: Run, episode: Episode) -> list[str]:
    """End the run's outage if this episode reached the model; under the fence. Returns the run fields it changed
    (["state"] when an outage ended) for the closing write to save (runs.execution._close).

    Costs no query outside an outage."""
    outage = run.state.get(STATE_KEY)
    if not outage:
        return []
    with statements.cursor() as cursor:
        cursor.execute(ASKED_SQL, {"episode": episode.pk, "kind": JournalKind.MODEL_CALL})
        asked = cursor.fetchone()[0]
    if not asked:
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


# Whether the episode reached the model (`recovered`).
ASKED_SQL = "SELECT EXISTS (SELECT 1 FROM runs_journalentry WHERE episode_id = %(episode)s AND kind = %(kind)s)"


def _hours(lasted: timedelta) -> str:
    minutes = int(lasted.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"

