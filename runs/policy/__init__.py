"""The follow-up policy: deterministic WHEN and WHICH CHANNEL; the model decides what to say.

Pure functions over the compiled plan (`followup`, `compliance`), aware
datetimes and zoneinfo; no database, no clock of their own.

Terms
- step: index into the ladder. `ladder[i]` fires `delay` after the previous
  outreach (step 0: after the run starts) when no reply came in between.
  Steps past the ladder's end (max_attempts > len(ladder)) repeat its last
  rung; max_attempts < len(ladder) cuts it short; unset means len(ladder).
- state["ladder_step"]: the next step to fire = steps fired since the last
  restart. The ladder is spent when it reaches max_attempts.
- state["attempts"]: fired steps whose episode actually sent (outreach_sent).
  A step that ran without sending still counts toward max_attempts, so a
  model that never sends cannot chase forever; the exception is a step that
  fired inside a closed send window (a late worker), which is retried.
- state["next_due_at"]: the pending ladder wake (None: nothing pending);
  state["paused_until"]: a contact's "not before" from a deferral;
  state["last_outreach_at"]: the last send; state["exhausted"]: the
  on_exhausted action was issued. Datetimes are stored as ISO strings.

Silence is an outcome. After each outreach the next step is armed at its
delay; if no reply cancels it, it fires. After the last step, an answer
deadline is armed (the last rung's delay; reply_grace if that is zero) as
action "followup" with step=None and channel=None: a follow-up episode with
nothing to send (the loop should not invite outreach). When it passes,
on_exhausted applies exactly once: escalate → action "escalate", fail →
"fail", complete_quietly → "complete". From then on
every event returns "idle" (no wakes), except a reply under on_reply=restart.

Replies (event "reply": an inbound reply that did not complete the task).
`cancels_pending_followup("reply")` is True: record the event and cancel the
queued follow-up before the reply's episode runs. Then by on_reply:
- pause: the same step fires reply_grace after the reply; counts carry on
  (at the deadline stage, the deadline moves to reply + grace);
- restart: step 0 fires reply_grace (+ step 0's delay) after the reply;
  ladder_step, attempts and exhausted reset;
- stop: nothing is scheduled; wait for another reply, a human or an event.
A reply clears paused_until.

Deferral ("not available until", out-of-office, "call me in 3 days",
`schedule_followup`). `defer_until` on any event replaces the next contact
(there is no contact before it) with `clamp_defer`: not before now, not after
now + 60 days, inside the send window. It wins over on_reply (stop too). When
the ladder is already spent it moves the answer deadline instead (deferred
instant + the final answer window); once exhausted it is ignored.

Human answers and API events keep the pending schedule (a missed wake
becomes due now). If the episode sent something, the pending step is re-armed
from now, without counting an attempt (under on_reply=stop after a reply,
nothing re-arms).

Cadence. With a plan `cadence`, `plan_next` lays recurring check-ins over the
ladder (runs.policy.cadence): one check-in per period at its slot, each one
ladder step 0 again, a reply serving its period.

Holidays. Public holidays of `followup.holidays` (runs.policy.public_holidays)
are not business days: no window opens on them and business-day delays skip
them.

Time. Business days (Monday=0), business hours and quiet hours (may wrap
midnight) are read in the zone from `resolve_timezone`. Every wake and
deferral passes `next_allowed_instant`: a time outside the window moves to
the next window opening plus a fixed per-run offset (0–299 s from the run
id), never dropped. Calendar-day delays keep the local time of day across
DST, seconds below a day are elapsed time, business-day delays count
business days. Spring-forward gaps map to the transition instant, fall-back
folds to the first occurrence.

Actions. "followup": schedule one follow-up episode at `due_at` (payload:
step, channel; step None = answer deadline) and cancel any other queued one;
only this action carries `due_at`. "wait_reply": nothing scheduled, wait for
the contact. "escalate" / "fail" / "complete": the on_exhausted outcome,
issued once. "idle": the policy has nothing more to do (a human has it).

Applying a NextStep: merge `state_updates` into run.state["policy"] and pass
that dict back as `state` next time; set run.wake_when to `wake_when`
("followup:<task_key>" when a wake is scheduled, "reply:<channel>" when
waiting with nothing scheduled, None otherwise). Map episode kinds to events:
start → "start", followup → "followup", inbound and call_report → "reply",
human_answer → "human_answer", event → "event". `outreach_sent` is whether
the episode actually sent something to the contact (a send held for its
window or a cap counts: it goes out at its time); `defer_until` is the
episode's requested next contact (schedule_followup, out-of-office). A held
send is not a next contact: it does not move the ladder (runs.decisions).
"""

from runs.policy.cadence import plan_next
from runs.policy.calendar import add_business_days
from runs.policy.ladder import EVENTS, NextStep, cancels_pending_followup, initial_state
from runs.policy.window import (
    MAX_DEFER,
    check_send_window,
    clamp_defer,
    next_allowed_instant,
    resolve_timezone,
    run_offset,
)

__all__ = [
    "EVENTS",
    "MAX_DEFER",
    "NextStep",
    "add_business_days",
    "cancels_pending_followup",
    "check_send_window",
    "clamp_defer",
    "initial_state",
    "next_allowed_instant",
    "plan_next",
    "resolve_timezone",
    "run_offset",
]
