"""What follows an episode: complete the run, or apply the follow-up policy's next step.

Called once per episode, under the worker's fence, with the locked run row:
tasks, contacts, held rows, what the episode sent and the open question are
read in one statement (read_standing); what it decides (the run's changed
fields, the episodes it schedules, whether queued follow-ups are cancelled) is
written by the episode's closing write (runs.execution), one statement with
`next_wake_at` and, when nothing else is due, the lease's release.
The policy (runs.policy) is pure; this module turns its answer into rows:
the next follow-up episode, `wake_when`, the run's status, and the policy's
own memory in run.state["policy"]. While a human is asked, the policy's state
still moves but nothing is scheduled: the human's answer re-arms the pending
wake (the policy keeps it in its state).

A send the window or a per-contact cap held back is an outbox row with
`not_before`, not the next contact: the ladder keeps its schedule and a
separate `event` episode ({"flush_outbox": true}) due at the earliest
`not_before` sends it. A run whose required tasks are done completes only
once nothing is held, so a held "thanks" still goes out (its flush episode
completes the run).
"""

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q

from runs import clock, escalations, events, journal, json_rows, policy, promises, statements
from runs.context import EpisodeOutcome
from runs.models import (
    Contact,
    Episode,
    EpisodeKind,
    EpisodeStatus,
    Escalation,
    EscalationKind,
    JournalKind,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
    Task,
    TaskStatus,
)
from runs.policy import memory

# The payload flag of an episode that only sends held messages (runs.execution runs it without the model).
FLUSH_FLAG = "flush_outbox"
# Outbox rows that reached (or may have reached) the contact.
REACHED = Q(status__in=[OutboxStatus.SENT, OutboxStatus.SENDING, OutboxStatus.UNCERTAIN])


@dataclass(frozen=True)
class Standing:
    """What the decision reads of the run after the episode, in one statement under its fence."""

    episode_id: int
    tasks: list[Task]
    contacts: list[Contact]
    # When the run's first held row may go out (the earliest not_before of its pending or sending rows); None when
    # nothing is held.
    held_until: datetime | None
    # The episode reached the contact (or may have, or will: held rows and drafts count; see REACHED).
    sent_something: bool
    # It reached them now (sent, sending or uncertain), not only held.
    sent_now: bool
    # The run's latest open escalation the run waits on (a notice, escalations.open_notice, is not one).
    open_escalation: Escalation | None


@dataclass
class Decision:
    """What the episode's closing write saves besides `next_wake_at` and the lease (runs.execution._close)."""

    # The run's fields the decision changed.
    fields: list[str] = field(default_factory=list)
    # Episodes to insert (the next follow-up, a flush), in order.
    scheduled: list[events.Planned] = field(default_factory=list)
    # Cancel the queued follow-ups first (the latest decision wins; chasing stops or pauses).
    cancel_followups: bool = False


STANDING_SQL = """
SELECT (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM runs_task t WHERE t.run_id = %(run)s) AS tasks,
       (SELECT coalesce(json_agg(c ORDER BY c.role, c.id), '[]') FROM runs_contact c WHERE c.run_id = %(run)s)
           AS contacts,
       (SELECT min(o.not_before) FROM runs_outboxmessage o
         WHERE o.run_id = %(run)s AND o.status IN ('pending', 'sending') AND o.not_before IS NOT NULL) AS held_until,
       EXISTS (SELECT 1 FROM runs_outboxmessage o WHERE o.episode_id = %(episode)s
                 AND (o.status IN ('sent', 'sending', 'uncertain', 'awaiting_approval')
                      OR (o.status = 'pending' AND o.not_before IS NOT NULL))) AS sent_something,
       EXISTS (SELECT 1 FROM runs_outboxmessage o WHERE o.episode_id = %(episode)s
                 AND o.status IN ('sent', 'sending', 'uncertain')) AS sent_now,
       (SELECT row_to_json(x) FROM runs_escalation x WHERE x.run_id = %(run)s AND x.status = 'open'
           AND NOT x.context @> %(notice)s::jsonb ORDER BY x.id DESC LIMIT 1) AS open_escalation
"""


# STANDING_SQL's `notice`: what a notice's context holds (escalations.open_notice).
_NOTICE = json.dumps({escalations.NOTICE_FLAG: True})


def read_standing(run: Run, episode: Episode) -> Standing:
    """Tasks, contacts, held rows, what the episode sent and the open question: one statement. Call under the
    fence, after the episode's own writes (its sends' results are written by that fence first)."""
    with statements.cursor() as cursor:
        cursor.execute(STANDING_SQL, {"run": run.pk, "episode": episode.pk, "notice": _NOTICE})
        tasks, contacts, held_until, sent_something, sent_now, question = cursor.fetchone()
    return Standing(
        episode_id=episode.pk, tasks=json_rows.instances(Task, tasks), contacts=json_rows.instances(Contact, contacts),
        held_until=held_until, sent_something=sent_something or _approved_draft_sent(episode), sent_now=sent_now,
        open_escalation=json_rows.instance(Escalation, question) if question else None,
    )


def apply_outcome(run: Run, episode: Episode, outcome: EpisodeOutcome) -> Decision:
    """Complete the run when every required task is done; otherwise schedule what the policy says, or wait.

    Returns what the caller's closing write saves (runs.execution); nothing when the run ended (end_run saved it).
    """
    standing = _standing(run, episode)
    held_until = standing.held_until
    if _required_tasks_done(run):
        if held_until is None:
            end_run(run, status=RunStatus.COMPLETED, outcome="All required tasks are done.")
            return Decision()
        # A held message (the thanks) has not gone out yet: no more chasing, and the flush episode that sends
        # it completes the run.
        question = standing.open_escalation
        changed = (_sleep(run, status=RunStatus.WAITING_HUMAN, wake_when=escalations.wake_reason(question)) if question
                   else _sleep(run, status=RunStatus.WAITING, wake_when="outbox:held"))
        return Decision(fields=changed, scheduled=[_flush(run, episode, at=held_until)], cancel_followups=True)
    flush = is_flush(episode)
    step = plan_next(run, episode, outcome)
    decision = Decision()
    if step.state_updates and not flush:
        run.state = {**run.state, "policy": {**run.state.get("policy", {}), **step.state_updates}}
        decision.fields.append("state")
    if step.action in ("complete", "fail"):
        status = RunStatus.COMPLETED if step.action == "complete" else RunStatus.FAILED
        end_run(run, status=status, outcome=step.reason or f"Follow-up policy: {step.action}.")
        return Decision()
    open_question = standing.open_escalation
    if open_question is not None:
        # Chasing pauses while a human is asked; their answer is the next episode.
        decision.cancel_followups = True
        decision.fields += _sleep(run, status=RunStatus.WAITING_HUMAN,
                                  wake_when=escalations.wake_reason(open_question))
    elif step.action == "escalate":
        decision.cancel_followups = True
        escalations.open_escalation(
            run, kind=EscalationKind.STUCK, episode=episode,
            prompt=step.reason or "The follow-up ladder is spent and required tasks are still open.",
        )
    elif step.action == "followup" and flush:
        # The ladder's schedule stands (event "event" re-issues the pending wake): its queued follow-up stays.
        decision.fields += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when or f"followup:{step.step}")
    elif step.action == "followup":
        # The latest decision wins: at most one follow-up is pending (the others are cancelled by the same write).
        decision.cancel_followups = True
        decision.scheduled.append(_followup(run, episode, step))
        decision.fields += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when or f"followup:{step.step}")
    else:
        decision.fields += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when)
    if held_until is not None:
        decision.scheduled.append(_flush(run, episode, at=held_until))
    return decision


def is_flush(episode: Episode) -> bool:
    """Whether the episode only sends the run's held messages (no model call, the ladder untouched)."""
    return episode.kind == EpisodeKind.EVENT and bool((episode.payload or {}).get(FLUSH_FLAG))


def plan_next(run: Run, episode: Episode, outcome: EpisodeOutcome) -> policy.NextStep:
    """Ask the follow-up policy what follows this episode.

    Only a requested next contact (`schedule_followup`, out-of-office) moves the ladder; a held send does not.
    """
    task_key, contact_tz = _chased(run)
    now = clock.now(run)
    if outcome.held_until is not None and not _standing(run, episode).sent_now:
        # Everything this episode said waits for its window or cap: silence is counted from when it goes out.
        now = max(now, outcome.held_until)
    return policy.plan_next(
        run.plan, state=run.state.get("policy", {}), contact_tz=contact_tz, org_tz=run.organization.default_timezone,
        now=now, event=events.event_for(episode.kind), run_id=run.offset_key, task_key=task_key,
        defer_until=outcome.followup_override, outreach_sent=_standing(run, episode).sent_something,
    )


def end_run(run: Run, *, status: str, outcome: str) -> None:
    """End the run (under its fence): queued episodes are cancelled, nothing wakes it again."""
    transition = {RunStatus.COMPLETED: run.complete, RunStatus.FAILED: run.fail, RunStatus.CANCELLED: run.cancel}
    transition[status]()
    run.outcome = outcome
    run.ended_at = clock.now(run)
    run.wake_when = None
    run.next_wake_at = None
    # `state` too: the policy's last memory is kept with the ending.
    run.save(update_fields=["status", "outcome", "ended_at", "wake_when", "next_wake_at", "state", "updated_at"])
    Episode.objects.filter(run_id=run.pk, status=EpisodeStatus.QUEUED).update(status=EpisodeStatus.CANCELLED)
    if status == RunStatus.COMPLETED:
        resolved = escalations.resolve_on_completion(run, note=f"Closed by the runtime: the run completed. {outcome}")
        if resolved:
            journal.write(run, [journal.Entry(episode_id=None, kind=JournalKind.NOTE, at=run.ended_at, data={
                "runtime": True, "text": "open questions closed: the run completed", "escalations": resolved})])


def _followup(run: Run, episode: Episode, step: policy.NextStep) -> events.Planned:
    channel, due_at = _as_the_contact_asked(run, step)
    return events.Planned(kind=EpisodeKind.FOLLOWUP, due_at=due_at, dedupe_key=f"followup:after:{episode.seq}",
                          payload={"step": step.step, "channel": channel})


def _as_the_contact_asked(run: Run, step: policy.NextStep):
    """(channel, due) for the chased contact's memory (runs.policy.memory): their preferred channel, never an
    opted-out one, not before they are back from an absence nor before a promise of theirs is due for its check."""
    contact = _chased_contact(run)
    if contact is None or not contact.history:
        return step.channel, step.due_at
    allowed = list(run.plan.get("capabilities") or [])
    channel = memory.channel_for(contact.history, ladder_channel=step.channel, allowed=allowed)
    open_keys = {task.key for task in _tasks(run) if task.status == TaskStatus.OPEN}
    # Away, or a promise not yet due for its check: no chasing before then (runs.absences, runs.promises).
    holds = [memory.absent_until(contact.history, now=step.due_at),
             promises.chase_after(contact.history, open_keys=open_keys)]
    away = max((hold for hold in holds if hold is not None and hold > step.due_at), default=None)
    if away is None:
        return channel, step.due_at
    tz = policy.resolve_timezone(run.plan, contact_tz=contact.timezone, org_tz=run.organization.default_timezone)
    return channel, policy.clamp_defer(run.plan, requested=away, now=step.due_at, tz=tz, run_id=run.offset_key)


def _flush(run: Run, episode: Episode, *, at: datetime) -> events.Planned:
    """An episode at `at` that sends the run's held messages, unless one is already queued by then.

    Kind `event`, not `followup`: a reply cancels pending follow-ups, never a held message.
    """
    return events.Planned(kind=EpisodeKind.EVENT, due_at=max(at, clock.now(run)),
                          dedupe_key=f"flush:after:{episode.seq}", payload={FLUSH_FLAG: True}, unless_queued_by=at)


def _sleep(run: Run, *, status: str, wake_when: str | None) -> list[str]:
    """Put the run to sleep in memory; returns the fields to save."""
    if run.status != status and status == RunStatus.WAITING_HUMAN:
        run.wait_for_human()
    elif run.status != status:
        run.sleep()
    run.wake_when = wake_when
    return ["status", "wake_when"]


def _standing(run: Run, episode: Episode) -> Standing:
    """The standing read once per decision (kept on the run row in hand for the helpers below)."""
    standing = getattr(run, "_standing", None)
    if standing is None or standing.episode_id != episode.pk:
        standing = run._standing = read_standing(run, episode)
    return standing


def _tasks(run: Run) -> list[Task]:
    standing = getattr(run, "_standing", None)
    return standing.tasks if standing is not None else list(run.tasks.all())


def _contacts(run: Run) -> list[Contact]:
    standing = getattr(run, "_standing", None)
    return standing.contacts if standing is not None else list(run.contacts.all())


def _required_tasks_done(run: Run) -> bool:
    required = [task for task in _tasks(run) if task.required]
    return bool(required) and all(task.status == TaskStatus.DONE for task in required)


def _chased(run: Run) -> tuple[str | None, str]:
    """The first open required task (in plan order) and its contact's timezone."""
    spec, contact = chase_target(run, tasks=_tasks(run), contacts=_contacts(run))
    return (spec["key"] if spec else None), chased_timezone(run, contact=contact)


def _chased_contact(run: Run) -> Contact | None:
    return chase_target(run, tasks=_tasks(run), contacts=_contacts(run))[1]


def chase_target(run: Run, *, tasks: list[Task], contacts: list[Contact]) -> tuple[dict | None, Contact | None]:
    """The plan's first open required task (its spec, in plan order) and the contact it chases (the task's role's,
    else the run's first), from the run's `tasks` and `contacts` as the caller has them."""
    open_keys = {task.key for task in tasks if task.required and task.status == TaskStatus.OPEN}
    spec = next((task for task in run.plan.get("tasks", []) if task["key"] in open_keys), None)
    contact = next((c for c in contacts if spec and c.role == spec.get("contact_role")), None)
    return spec, contact or (contacts[0] if contacts else None)


def chased_timezone(run: Run, *, contact: Contact | None) -> str:
    """The timezone the chased `contact` is reached in (the organization's without one)."""
    return contact.timezone if contact else run.organization.default_timezone


def _approved_draft_sent(episode: Episode) -> bool:
    """An approval's answer that sent the draft counts as reaching out now: the ladder waits for an answer
    from when the message actually went out (runs.approvals)."""
    payload = episode.payload or {}
    if episode.kind != EpisodeKind.HUMAN_ANSWER or payload.get("approval") not in ("approved", "edited"):
        return False
    return OutboxMessage.objects.filter(REACHED, pk=payload.get("outbox_message_id")).exists()
