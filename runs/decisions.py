"""What follows an episode: complete the run, or apply the follow-up policy's next step.

Called once per episode, under the worker's fence, with the locked run row
(tasks and contacts are read once, prefetched onto it).
The policy (runs.policy) is pure; this module turns its answer into rows:
the next follow-up episode, `wake_when`, the run's status, and the policy's
own memory in run.state["policy"]. While a human is asked, the policy's state
still moves but nothing is scheduled: the human's answer re-arms the pending
wake (the policy keeps it in its state).
"""

from django.db.models import prefetch_related_objects

from runs import clock, escalations, events, policy
from runs.context import EpisodeOutcome
from runs.models import (
    Episode,
    EpisodeKind,
    EpisodeStatus,
    Escalation,
    EscalationKind,
    EscalationStatus,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
    TaskStatus,
)


def apply_outcome(run: Run, episode: Episode, outcome: EpisodeOutcome) -> None:
    """Complete the run when every required task is done; otherwise schedule what the policy says, or wait.

    The run row is saved once, `next_wake_at` (the earliest queued episode) included.
    """
    # One read of tasks and contacts for both the completion check and the policy's chased contact.
    prefetch_related_objects([run], "tasks", "contacts")
    if _required_tasks_done(run):
        end_run(run, status=RunStatus.COMPLETED, outcome="All required tasks are done.")
        return
    step = plan_next(run, episode, outcome)
    changed = []
    if step.state_updates:
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
        changed += _sleep(run, status=RunStatus.WAITING_HUMAN, wake_when=f"human:{open_question.pk}")
    elif step.action == "escalate":
        events.cancel_pending_followups(run)
        escalations.open_escalation(
            run, kind=EscalationKind.STUCK, episode=episode,
            prompt=step.reason or "The follow-up ladder is spent and required tasks are still open.",
        )
    elif step.action == "followup":
        changed += _schedule_followup(run, episode, step)
    else:
        changed += _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when)
    run.next_wake_at = events.earliest_due(run.pk)
    run.save(update_fields=[*changed, "next_wake_at", "updated_at"])


def plan_next(run: Run, episode: Episode, outcome: EpisodeOutcome) -> policy.NextStep:
    """Ask the follow-up policy what follows this episode."""
    task_key, contact_tz = _chased(run)
    return policy.plan_next(
        run.plan, state=run.state.get("policy", {}), contact_tz=contact_tz, org_tz=run.organization.default_timezone,
        now=clock.now(run), event=events.event_for(episode.kind), run_id=run.pk, task_key=task_key,
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


def _schedule_followup(run: Run, episode: Episode, step: policy.NextStep) -> list[str]:
    # The latest decision wins: at most one follow-up is pending.
    events.cancel_pending_followups(run)
    events.schedule_episode(
        run, kind=EpisodeKind.FOLLOWUP, due_at=step.due_at, dedupe_key=f"followup:after:{episode.seq}",
        payload={"step": step.step, "channel": step.channel},
    )
    return _sleep(run, status=RunStatus.WAITING, wake_when=step.wake_when or f"followup:{step.step}")


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
    return Escalation.objects.filter(run_id=run.pk, status=EscalationStatus.OPEN).order_by("-pk").first()


def _chased(run: Run) -> tuple[str | None, str]:
    """The first open required task (in plan order) and its contact's timezone (any contact's as a fallback)."""
    open_keys = {task.key for task in run.tasks.all() if task.required and task.status == TaskStatus.OPEN}
    spec = next((task for task in run.plan.get("tasks", []) if task["key"] in open_keys), None)
    contacts = list(run.contacts.all())
    contact = next((c for c in contacts if spec and c.role == spec.get("contact_role")), None)
    contact = contact or (contacts[0] if contacts else None)
    return (spec["key"] if spec else None), (contact.timezone if contact else run.organization.default_timezone)


def _sent_something(episode: Episode) -> bool:
    """Whether the episode reached the contact (or may have: an uncertain send counts, a deferred one does not)."""
    return OutboxMessage.objects.filter(
        episode_id=episode.pk, status__in=[OutboxStatus.SENT, OutboxStatus.SENDING, OutboxStatus.UNCERTAIN]
    ).exists()
