"""SimScheduler: drives one simulated run through weeks of virtual time in a few hundred queries.

The run is a normal run (DESIGN principle 7): the same `advance_run`, the
same leases, journal and outbox. Only its clock differs: `run.virtual_now`
(runs.clock). The scheduler jumps that clock straight to the next thing that
can happen — the run's next queued episode or a persona's next action — so
nothing ever waits and the wall clock never enters the run's story.

Each turn: advance the run at the current virtual time, hand what it sent to
the personas, then jump, and deliver what the personas send by then through
the webhook intake (simulator.delivery) and the scripted human's answers
(simulator.human_answers). It stops when the run has ended, when nothing is
due any more (waiting for a human or a reply nobody will send: for an eval
case that is an end state), or at the horizon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from connectors import addresses
from connectors.models import Channel
from runs import json_rows, statements, worker
from runs.models import EpisodeStatus, EscalationKind, EscalationStatus, OutboxStatus, Run
from runs.models.run import OPEN_RUN_STATUSES
from simulator import delivery
from simulator.approvers import Approver
from simulator.delivery import Delivery
from simulator.human_answers import Human
from simulator.personas import Cast

SANDBOX_PREFIX = "sandbox-"
WORKER_OWNER = "simulator"
# A run that keeps finding work at one instant without moving on is a runtime bug, not a long case.
MAX_IDLE_TURNS = 50


# What the scheduler reads after each advance (`_run_state`): the run's status, its earliest queued episode
# (runs.events.earliest_due), what it sent that was not yet observed (as `_observe_sends` hands it to the personas,
# in send order, with the Reply-To token the sandbox provider was handed: connectors.sandbox), whether a draft
# waits for approval.
# When none of that can change where the clock goes next (nothing new to hear or answer) and the sooner of
# that episode and `other` (the personas' next action) is ahead of now and before the horizon, the same
# statement jumps the clock there (as `_jump`): a quiet turn is one statement, not two. Otherwise run() decides.
STATE_SQL = """
WITH state AS (
    SELECT r.status,
           (SELECT min(e.due_at) FROM runs_episode e WHERE e.run_id = r.id AND e.status = '__QUEUED__') AS next_due,
           (SELECT json_agg(json_build_object(
                       'id', o.id, 'channel', o.channel, 'tool', o.tool, 'recipient', o.recipient, 'sent_at', o.sent_at,
                       'payload', o.payload, 'provider_message_id', o.provider_message_id, 'idem_key', o.idem_key,
                       'episode__kind', e.kind,
                       'run_token', (SELECT s.payload ->> 'run_token' FROM connectors_sandboxmessage s
                                      WHERE s.idem_key = o.idem_key LIMIT 1))
                   ORDER BY o.sent_at, o.id)::text
              FROM runs_outboxmessage o LEFT JOIN runs_episode e ON e.id = o.episode_id
             WHERE o.run_id = r.id AND o.status = '__SENT__' AND o.id > %(seen)s) AS sent,
           EXISTS (SELECT 1 FROM runs_escalation x
                    WHERE x.run_id = r.id AND x.kind = '__APPROVAL__' AND x.status = '__OPEN__') AS approvals
      FROM runs_run r
     WHERE r.id = %(run)s
), wake AS (
    SELECT least(state.next_due, %(other)s::timestamptz) AS at FROM state
     WHERE %(may_jump)s AND state.status IN (__OPEN_STATUSES__) AND state.sent IS NULL
       AND NOT state.approvals
), jumped AS (
    UPDATE runs_run r SET virtual_now = wake.at
      FROM wake
     WHERE r.id = %(run)s AND wake.at > %(now)s::timestamptz AND wake.at < %(horizon)s::timestamptz
 RETURNING r.virtual_now
)
SELECT state.status, state.next_due, state.sent, state.approvals, (SELECT virtual_now FROM jumped) FROM state
"""
# The statuses and kinds are constants written into the text (one text still, prepared once): fewer parameters
# for psycopg to adapt every turn.
STATE_SQL = (STATE_SQL.replace("__QUEUED__", EpisodeStatus.QUEUED).replace("__SENT__", OutboxStatus.SENT)
             .replace("__APPROVAL__", EscalationKind.APPROVAL).replace("__OPEN__", EscalationStatus.OPEN)
             .replace("__OPEN_STATUSES__", statements.literals(OPEN_RUN_STATUSES)))

# The clock moved when STATE_SQL could not move it (a turn with sends to hear or an approval to answer).
JUMP_SQL = "UPDATE runs_run SET virtual_now = %(at)s WHERE id = %(run)s"


class RealSendError(RuntimeError):
    """A simulated run's message went to a real provider: the simulation stops at once."""


class SchedulerStuck(RuntimeError):
    """The run had work due but made no progress."""


@dataclass
class SchedulerReport:
    stopped: str  # ended | idle | horizon
    turns: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    # (channel, address) -> virtual time of the persona's opt-out, for the policy checks.
    opt_outs: dict[tuple[str, str], datetime] = field(default_factory=dict)
    # Drafts the case's human answered in approval mode: approved | edited | rejected | edit_refused -> count.
    approvals: dict[str, int] = field(default_factory=dict)


class SimScheduler:
    def __init__(self, run: Run, *, cast: Cast, horizon: datetime,
                 progress: Callable[[float], None] | None = None, approvals: list[dict] | None = None,
                 human: Human | None = None) -> None:
        self.run_id = run.pk
        self.organization = run.organization
        self.cast = cast
        self.start = run.virtual_now
        self.now = run.virtual_now
        self.horizon = horizon
        self.progress = progress
        self._seen_outbox_id = 0
        self.approver = Approver(approvals)
        self.human = human or Human()

    def run(self) -> SchedulerReport:
        report = SchedulerReport(stopped="horizon")
        idle_turns = 0
        while True:
            report.turns += 1
            ran = worker.advance_run(self.run_id, owner=WORKER_OWNER)
            status, next_due, sent, approvals, jumped = self._run_state(jump=True)
            if sent:
                self._observe_sends(sent)
            # A draft waiting for approval is answered at once: its answer is due work at this instant.
            if approvals:
                self.approver.answer_open(self.run_id)
                status, next_due, _, _, _ = self._run_state(jump=False)
            if status not in OPEN_RUN_STATUSES:
                report.stopped = "ended"
                break
            if jumped is not None:
                idle_turns = 0
                self._jumped(jumped)
            else:
                wake = min((t for t in (next_due, self.cast.next_at(), self.human.next_at(self.run_id))
                            if t is not None), default=None)
                if wake is None:
                    report.stopped = "idle"
                    break
                if wake >= self.horizon:  # the horizon is the first instant after the simulated weeks
                    break
                if wake <= self.now:
                    # Still work at this instant (the slice cap, or an episode the last advance left queued).
                    idle_turns = 0 if ran else idle_turns + 1
                    if idle_turns > MAX_IDLE_TURNS:
                        raise SchedulerStuck(f"run {self.run_id}: work due at {self.now} but advance_run ran nothing")
                else:
                    idle_turns = 0
                    self._jump(wake)
            self._deliver_due(report)
            self.human.answer_due(self.run_id, now=self.now)
        self._report_progress(1.0)
        report.approvals = dict(sorted(self.approver.counts.items()))
        return report

    def _run_state(self, *, jump: bool) -> tuple[str, datetime | None, list[dict], bool, datetime | None]:
        """(status, earliest queued episode while open, the sends not yet observed, a draft waiting?, where the clock
        jumped or None), in one statement (STATE_SQL); `jump`: it may move the clock when nothing else can
        change where to. A human with steps left looks escalations up first (Human.next_at): no jump then."""
        may_jump = jump and not self.human.pending()
        with statements.cursor() as cursor:  # prepared: one text every turn
            cursor.execute(STATE_SQL, {
                "run": self.run_id, "seen": self._seen_outbox_id, "may_jump": may_jump,
                "other": self.cast.next_at() if may_jump else None, "now": self.now, "horizon": self.horizon,
            })
            status, next_due, sent, approvals, jumped = cursor.fetchone()
        sends = [{**row, "sent_at": json_rows.datetime_of(row["sent_at"])} for row in json.loads(sent or "[]")]
        return status, (next_due if status in OPEN_RUN_STATUSES else None), sends, approvals, jumped

    def _jump(self, wake: datetime) -> None:
        # One UPDATE of virtual_now: the worker re-reads the run, so every module sees the new time.
        with statements.cursor() as cursor:  # prepared, as STATE_SQL's own jump
            cursor.execute(JUMP_SQL, {"run": self.run_id, "at": wake})
        self._jumped(wake)

    def _jumped(self, wake: datetime) -> None:
        self.now = wake
        total = (self.horizon - self.start).total_seconds() or 1.0
        self._report_progress(min((wake - self.start).total_seconds() / total, 1.0))

    def _report_progress(self, fraction: float) -> None:
        if self.progress is not None:
            self.progress(fraction)

    def _observe_sends(self, rows: list[dict]) -> None:
        """Hand the run's new sends (read by `_run_state`) to the personas; a send that reached a real provider
        stops the simulation."""
        self._seen_outbox_id = max(row["id"] for row in rows)
        real = [row for row in rows if not (row["provider_message_id"] or "").startswith(SANDBOX_PREFIX)]
        if real:
            raise RealSendError(f"run {self.run_id}: outbox rows {[r['id'] for r in real]} were not sent to the "
                                "sandbox connector")
        self.cast.hear([{**row, "run_token": row["run_token"] or ""} for row in rows])

    def _deliver_due(self, report: SchedulerReport) -> None:
        for action in self.cast.pop_due(self.now):
            found = delivery.deliver(action, run_id=self.run_id, organization=self.organization)
            if action.kind == "stop":
                report.opt_outs.setdefault((Channel.SMS, addresses.normalize_phone(action.sender)), action.at)
            report.deliveries.append(found)

