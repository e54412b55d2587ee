"""What follows an episode: complete the run, or apply the follow-up policy's next step.

Called once per episode, under the worker's fence, with the locked run row
(tasks and contacts are read once, prefetched onto it).
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

from django.db.models import Q, prefetch_related_objects

from runs import clock, escalations, events, journal, outbox, policy, promises
from runs.context import EpisodeOutcome
from runs.models import (
    Episode,
    EpisodeKind,
    EpisodeStatus,
    Escalation,
    EscalationKind,
    EscalationStatus,
    JournalKind,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
    TaskStatus,
)
from runs.policy import memory

# The payload flag of an episode that only sends held messages (runs.execution runs it without the model).
FLUSH_FLAG = "flush_outbox"
# Outbox rows that reached (or may have reached) the contact.
REACHED = Q(status__in=[OutboxStatus.SENT, OutboxStatus.SENDING, OutboxStatus.UNCERTAIN])


def apply_outcome(run: Run, episode: Episode, outcome: EpisodeOutcome) -> None:
    """Complete the run when every required task is done; otherwise schedule what the policy says, or wait.

    The run row is saved once, `next_wake_at` (the earliest queued episode) included.
    """
    # One read of tasks and contacts for both the completion check and the policy's chased contact.
    prefetch_related_objects([run], "tasks", "contacts")
    held_until = outbox.earliest_held(run.pk)
    if _required_tasks_done(run):
        if held_until is None:
            end_run(run, status=RunStatus.COMPLETED, outcome="All required tasks are done.")
            return
        # A held message (the thanks) has not gone out yet: no more chasing, and the flush episode that sends
        # it completes the run.
        events.cancel_pending_followups(run)
        question = _open_escalation(run)
        changed = (_sleep(run, status=RunStatus.WAITING_HUMAN, wake_when=escalations.wake_reason(question)) if question
                   else _sleep(run, status=RunStatus.WAITING, wake_when="outbox:held"))
        _schedule_flush(run, episode, at=held_until)
        run.next_wake_at = events.earliest_due(run.pk)
        run.save(update_fields=[*changed, "next_wake_at", "updated_at"])
        return
    flush = is_flush(episode)
    step = plan_next(run, episode, outcome)
    changed = []
    if step.state_updates and not flush:
        run.state = {**run.state, "policy": {**run.state.get("policy", {}), **step.state_updates}}
        changed.append("state")
    if step.action in ("complete", "fail"):
        status = RunStatus.COMPLETED if step.action == "complete" else RunStatus.FAILED
        end_run(run, status=status, outcome=step.reason or f"Follow-up policy: {step.action}.")
        return
    open_question = _open_escalation(run)
    if open_question is not None:
        # Chasing pauses while a human is asked; their answer is the next episode.
        events.cancel_pending_followups(run)
        changed += _sleep(run, status=RunStatus.WAITING_HUMAN, wake_when=escalations.wake_reason(open_question))
    elif step.action == "escalate":
        events.cancel_pending_followups(run)
        escalations.open_escalation(
            run, kind=EscalationKind.STUCK, episode=episode,
            prompt=step.reason or "The follow-up ladder is spent and required tasks are still open.",
        )
    elif step.action == "followup" and flush:
        # The ladder's schedule stands (event "event" re-issues the pending wake): its queued follow-up stays.
        changed += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when or f"followup:{step.step}")
    elif step.action == "followup":
        changed += _schedule_followup(run, episode, step)
    else:
        changed += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when)
    if held_until is not None:
        _schedule_flush(run, episode, at=held_until)
    run.next_wake_at = events.earliest_due(run.pk)
    run.save(update_fields=[*changed, "next_wake_at", "updated_at"])


def is_flush(episode: Episode) -> bool:
    """Whether the episode only sends the run's held messages (no model call, the ladder untouched)."""
    return episode.kind == EpisodeKind.EVENT and bool((episode.payload or {}).get(FLUSH_FLAG))


def plan_next(run: Run, episode: Episode, outcome: EpisodeOutcome) -> policy.NextStep:
    """Ask the follow-up policy what follows this episode.

    Only a requested next contact (`schedule_followup`, out-of-office) moves the ladder; a held send does not.
    """
    task_key, contact_tz = _chased(run)
    now = clock.now(run)
    if outcome.held_until is not None and not _sent_now(episode):
        # Everything this episode said waits for its window or cap: silence is counted from when it goes out.
        now = max(now, outcome.held_until)
    return policy.plan_next(
        run.plan, state=run.state.get("policy", {}), contact_tz=contact_tz, org_tz=run.organization.default_timezone,
        now=now, event=events.event_for(episode.kind), run_id=run.offset_key, task_key=task_key,
        defer_until=outcome.followup_override, outreach_sent=_sent_something(episode),
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


def _schedule_followup(run: Run, episode: Episode, step: policy.NextStep) -> list[str]:
    # The latest decision wins: at most one follow-up is pending.
    events.cancel_pending_followups(run)
    channel, due_at = _as_the_contact_asked(run, step)
    events.schedule_episode(
        run, kind=EpisodeKind.FOLLOWUP, due_at=due_at, dedupe_key=f"followup:after:{episode.seq}",
        payload={"step": step.step, "channel": channel},
    )
    return _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when or f"followup:{step.step}")


def _as_the_contact_asked(run: Run, step: policy.NextStep):
    """(channel, due) for the chased contact's memory (runs.policy.memory): their preferred channel, never an
    opted-out one, not before they are back from an absence nor before a promise of theirs is due for its check."""
    contact = _chased_contact(run)
    if contact is None or not contact.history:
        return step.channel, step.due_at
    allowed = list(run.plan.get("capabilities") or [])
    channel = memory.channel_for(contact.history, ladder_channel=step.channel, allowed=allowed)
    open_keys = {task.key for task in run.tasks.all() if task.status == TaskStatus.OPEN}
    # Away, or a promise not yet due for its check: no chasing before then (runs.absences, runs.promises).
    holds = [memory.absent_until(contact.history, now=step.due_at),
             promises.chase_after(contact.history, open_keys=open_keys)]
    away = max((hold for hold in holds if hold is not None and hold > step.due_at), default=None)
    if away is None:
        return channel, step.due_at
    tz = policy.resolve_timezone(run.plan, contact_tz=contact.timezone, org_tz=run.organization.default_timezone)
    return channel, policy.clamp_defer(run.plan, requested=away, now=step.due_at, tz=tz, run_id=run.offset_key)


def _schedule_flush(run: Run, episode: Episode, *, at) -> None:
    """An episode at `at` that sends the run's held messages, unless one is already queued by then.

    Kind `event`, not `followup`: a reply cancels pending follow-ups, never a held message.
    """
    queued = Episode.objects.filter(run_id=run.pk, kind=EpisodeKind.EVENT, status=EpisodeStatus.QUEUED,
                                    payload__contains={FLUSH_FLAG: True}, due_at__lte=at)
    if not queued.exists():
        events.schedule_episode(run, kind=EpisodeKind.EVENT, due_at=max(at, clock.now(run)),
                                dedupe_key=f"flush:after:{episode.seq}", payload={FLUSH_FLAG: True})


def _sleep(run: Run, *, status: str, wake_when: str | None) -> list[str]:
    """Put the run to sleep in memory; returns the fields to save."""
    if run.status != status and status == RunStatus.WAITING_HUMAN:
        run.wait_for_human()
    elif run.status != status:
        run.sleep()
    run.wake_when = wake_when
    return ["status", "wake_when"]


def _required_tasks_done(run: Run) -> bool:
    required = [task for task in run.tasks.all() if task.required]
    return bool(required) and all(task.status == TaskStatus.DONE for task in required)


def _open_escalation(run: Run) -> Escalation | None:
    """The open question the run waits on; a notice (a model outage) does not stop it (escalations.open_notice)."""
    return (Escalation.objects.filter(run_id=run.pk, status=EscalationStatus.OPEN)
            .exclude(context__contains={escalations.NOTICE_FLAG: True}).order_by("-pk").first())


def _chased(run: Run) -> tuple[str | None, str]:
    """The first open required task (in plan order) and its contact's timezone (any contact's as a fallback)."""
    spec = _chased_task(run)
    contact = _chased_contact(run)
    return (spec["key"] if spec else None), (contact.timezone if contact else run.organization.default_timezone)


def _chased_task(run: Run) -> dict | None:
    open_keys = {task.key for task in run.tasks.all() if task.required and task.status == TaskStatus.OPEN}
    return next((task for task in run.plan.get("tasks", []) if task["key"] in open_keys), None)


def _chased_contact(run: Run):
    spec = _chased_task(run)
    contacts = list(run.contacts.all())
    contact = next((c for c in contacts if spec and c.role == spec.get("contact_role")), None)
    return contact or (contacts[0] if contacts else None)


def _sent_something(episode: Episode) -> bool:
    """Whether the episode reached the contact (or may have: an uncertain send counts; a held one too, it goes
    out at its time; a draft awaiting approval too: the step was taken, a human decides whether it goes out).

    An approval's answer that sent the draft counts as reaching out now: the ladder waits for an answer
    from when the message actually went out (runs.approvals)."""
    held = Q(status=OutboxStatus.PENDING, not_before__isnull=False)
    draft = Q(status=OutboxStatus.AWAITING_APPROVAL)
    if OutboxMessage.objects.filter(REACHED | held | draft, episode_id=episode.pk).exists():
        return True
    payload = episode.payload or {}
    if episode.kind != EpisodeKind.HUMAN_ANSWER or payload.get("approval") not in ("approved", "edited"):
        return False
    return OutboxMessage.objects.filter(REACHED, pk=payload.get("outbox_message_id")).exists()


def _sent_now(episode: Episode) -> bool:
    return OutboxMessage.objects.filter(REACHED, episode_id=episode.pk).exists()
