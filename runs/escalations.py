"""Questions for a human: open, close, resolve (uncertain sends), cancel, and who is working on them (claim).

Opening happens under the worker's lease fence (the caller passes the locked
run); every escalation stores the typed options that fit it
(runs.answer_options). What an answer does is runs.answers: it closes the row
here (`close`, locked, once) and wakes the run with a `human_answer` episode
through events.record_event (`wake_run`).
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from agents.models import ApiKey, Organization
from runs import answer_options, clock, events, statements
from runs.models import (
    Episode,
    EpisodeKind,
    Escalation,
    EscalationKind,
    EscalationStatus,
    OutboxMessage,
    Run,
    RunStatus,
)

UNCERTAIN_OUTCOMES = ("sent", "not_sent")
# The second notice of a run-less escalation (unmatched inbound, provider outage), or of a run whose plan
# predates escalation_sla: the schema's default.
DEFAULT_ESCALATION_SLA_S = 4 * 3600
# A first notice, then one more past the SLA.
NOTICES = 2
# Escalation.context flag of a notice (open_notice): the run does not wait for its answer.
NOTICE_FLAG = "notice"


class EscalationClosed(Exception):
    """The escalation was already answered, resolved or cancelled (the API answers 409)."""


def open_escalation(
    run: Run,
    *,
    kind: str,
    prompt: str,
    options: Sequence[str] = (),
    context: dict | None = None,
    episode: Episode | None = None,
    outbox_message: OutboxMessage | None = None,
) -> Escalation:
    """Open an escalation and put the run to wait for a human. `run` is the row locked by the caller's fence.

    `options` are answers the agent suggests (kept in context["suggested_answers"]); the escalation's
    typed options are the registered ones that fit its kind (runs.answer_options).
    """
    context = dict(context or {})
    if options:
        context["suggested_answers"] = [str(option) for option in options]
    escalation = Escalation(
        organization_id=run.organization_id, run=run, kind=kind, prompt=prompt,
        context=context, episode=episode, outbox_message=outbox_message,
        # The run's clock: a simulated run's question is raised on its virtual day, not today.
        raised_at=clock.now(run),
        # A simulated run's question is the simulator's to answer: nobody is told.
        notify_at=None if run.sim else clock.wall_now(),
    )
    escalation.options = answer_options.options_for(escalation)
    escalation.save()
    if run.status != RunStatus.WAITING_HUMAN:
        run.wait_for_human()
    run.wake_when = wake_reason(escalation)
    run.save(update_fields=["status", "wake_when", "updated_at"])
    return escalation


def open_notice(run: Run, *, kind: str, prompt: str, context: dict, episode: Episode | None = None) -> Escalation:
    """Tell a human without making the run wait: the runtime handles it and closes it (`resolve_by_runtime`).

    context["notice"] marks it, so the follow-up policy does not pause chasing for it (runs.decisions)."""
    escalation = Escalation(
        organization_id=run.organization_id, run=run, kind=kind, prompt=prompt,
        context={**context, NOTICE_FLAG: True}, episode=episode, raised_at=clock.now(run),
        notify_at=None if run.sim else clock.wall_now(),
    )
    escalation.options = answer_options.options_for(escalation)
    escalation.save()
    return escalation


def resolve_by_runtime(escalation_id: int, *, note: str, at: datetime) -> int:
    """The runtime settled what a notice was about (the model answers again): resolved with `note`, no episode.
    Returns 1 when it was still open."""
    with statements.cursor() as cursor:
        cursor.execute(RESOLVE_BY_RUNTIME_SQL, {"id": escalation_id, "note": note, "at": at})
        return cursor.rowcount


RESOLVE_BY_RUNTIME_SQL = """
UPDATE runs_escalation SET status = 'resolved', answer = %(note)s, answered_via = 'runtime', answered_at = %(at)s
 WHERE id = %(id)s AND status = 'open'
"""


def wake_reason(escalation: Escalation) -> str:
    """The run's `wake_when` while `escalation` is open: `human:approval` for a draft, else `human:<id>`."""
    return "human:approval" if escalation.kind == EscalationKind.APPROVAL else f"human:{escalation.pk}"


def open_unmatched(
    organization: Organization, *, inbound_message_id: int, prompt: str, context: dict | None = None
) -> Escalation:
    """Triage for an inbound message no run claimed: it is kept, never dropped."""
    escalation = Escalation(
        organization=organization, kind=EscalationKind.UNMATCHED_INBOUND, prompt=prompt,
        inbound_message_id=inbound_message_id, context=context or {}, notify_at=clock.wall_now(),
    )
    escalation.options = answer_options.options_for(escalation)
    escalation.save()
    return escalation


def raise_outage(organization_id: int, *, channel: str, error: str) -> None:
    """One open alert per organization and channel while its provider fails (a second call adds nothing).

    Run-less, like unmatched inbound: no run waits on it. The sends it is about
    stay held in the outbox and go out by themselves (clear_outage closes it).
    ON CONFLICT DO NOTHING on the partial unique index: concurrent workers
    hitting the same outage open one alert.
    """
    alert = Escalation(
        organization_id=organization_id, kind=EscalationKind.PROVIDER_OUTAGE, channel=channel,
        prompt=(f"The {channel} provider is failing ({error[:300]}). Sends on this channel are held and retried "
                "by themselves; this alert closes when one goes through. Check the provider's status page "
                "and this organization's credentials."),
        context={"channel": channel, "error": error[:1000]}, raised_at=clock.wall_now(), notify_at=clock.wall_now(),
    )
    alert.options = answer_options.options_for(alert)
    Escalation.objects.bulk_create([alert], ignore_conflicts=True)


def clear_outage(organization_id: int, *, channel: str) -> int:
    """The provider answered again: close the open outage alert (if any); returns how many were closed."""
    return Escalation.objects.filter(
        organization_id=organization_id, kind=EscalationKind.PROVIDER_OUTAGE, channel=channel,
        status=EscalationStatus.OPEN,
    ).update(status=EscalationStatus.RESOLVED, answer="the provider answered again", answered_via="runtime",
             answered_at=clock.wall_now())


def resolve_on_completion(run: Run, *, note: str) -> list[int]:
    """The run completed: every question still open about it is resolved with `note` (no open escalation
    outlives a completed run, and nobody is notified about it again). `run` is locked by the caller's fence.
    Returns the ids resolved."""
    with statements.cursor() as cursor:
        cursor.execute(RESOLVE_ON_COMPLETION_SQL, {"run": run.pk, "note": note[:2000], "at": clock.now(run)})
        return [row[0] for row in cursor.fetchall()]


# resolve_on_completion's one statement: the ids come newest first (the model's ordering).
RESOLVE_ON_COMPLETION_SQL = """
WITH resolved AS (
    UPDATE runs_escalation SET status = 'resolved', answer = %(note)s, answered_via = 'runtime',
                               answered_at = %(at)s, notify_at = NULL
     WHERE run_id = %(run)s AND status = 'open'
 RETURNING id, created_at
)
SELECT id FROM resolved ORDER BY created_at DESC
"""


def take_due_notices(*, batch: int) -> list[Escalation]:
    """Open escalations whose next notice is due, locked until the caller's transaction ends; the caller
    queues each one's notice and moves it on with notice_queued. SKIP LOCKED: another dispatcher has those."""
    return list(
        Escalation.objects.select_for_update(no_key=True, skip_locked=True, of=("self",)).select_related("run")
        .filter(status=EscalationStatus.OPEN, notify_at__isnull=False, notify_at__lte=clock.wall_now())
        .order_by("notify_at", "id")[:batch]
    )


def notice_queued(escalation: Escalation, *, delivered_from: datetime) -> None:
    """One more notice is queued; it reaches the ops team from `delivered_from` (later in their quiet hours).
    After the first, the next is due `escalation_sla` after that; after the second, none."""
    escalation.notices_queued += 1
    escalation.notify_at = (
        delivered_from + timedelta(seconds=sla_seconds(escalation)) if escalation.notices_queued < NOTICES else None
    )
    escalation.save(update_fields=["notices_queued", "notify_at"])


def sla_seconds(escalation: Escalation) -> int:
    """How long the escalation may stay unanswered before its ops team is told again: the agent's
    `escalation_sla` as compiled into the run's plan."""
    plan = escalation.run.plan if escalation.run is not None else {}
    sla = ((plan or {}).get("followup") or {}).get("escalation_sla_s")
    return DEFAULT_ESCALATION_SLA_S if sla is None else int(sla)


class ClaimRefused(Exception):
    """Someone else holds the escalation, or it is closed; the message names who or what."""


def claim(escalation: Escalation, *, user) -> Escalation:
    """Assign the open escalation to `user` (the review queue's "claim"); a no-op when they hold it already.

    A conditional UPDATE: of two people claiming at once, one wins and the other is told who did.
    """
    claimed = Escalation.objects.filter(pk=escalation.pk, status=EscalationStatus.OPEN).filter(
        Q(assignee__isnull=True) | Q(assignee=user)).update(assignee=user, assigned_at=clock.wall_now())
    current = Escalation.objects.select_related("assignee").get(pk=escalation.pk)
    if not claimed:
        if current.status != EscalationStatus.OPEN:
            raise ClaimRefused(f"escalation {current.pk} is already {current.status}: nothing to claim")
        holder = current.assignee.get_username() if current.assignee else "someone else"
        raise ClaimRefused(f"escalation {current.pk} is claimed by {holder}; ask them, or unassign it first")
    return current


def unassign(escalation: Escalation) -> Escalation:
    """Put the escalation back in the queue for anyone (a claim left behind by someone away)."""
    Escalation.objects.filter(pk=escalation.pk).update(assignee=None, assigned_at=None)
    return Escalation.objects.get(pk=escalation.pk)


def resolve(
    escalation: Escalation, *, outcome: str, by_user=None, by_key: ApiKey | None = None, via: str
) -> Episode | None:
    """Settle an uncertain send: `sent` adopts it, `not_sent` makes the outbox row pending again.

    The run wakes with a `human_answer` episode carrying the outcome, so the
    next episode can send what was not sent. Raises EscalationClosed if not open.
    """
    if outcome not in UNCERTAIN_OUTCOMES:
        raise ValueError(f"outcome must be one of {UNCERTAIN_OUTCOMES}, not {outcome!r}")
    with transaction.atomic():
        locked = close(escalation, status=EscalationStatus.RESOLVED, answer=outcome, by_user=by_user, by_key=by_key,
                        via=via)
        if locked.outbox_message_id is not None:
            settle_send(locked.outbox_message_id, sent=outcome == "sent")
        return wake_run(locked, payload={"outcome": outcome, "outbox_message_id": locked.outbox_message_id})


def cancel(escalation: Escalation, *, by_user=None, by_key: ApiKey | None = None, via: str) -> Episode | None:
    """Withdraw the question; the run wakes (with `cancelled: true`) so the follow-up policy picks up again."""
    with transaction.atomic():
        locked = close(escalation, status=EscalationStatus.CANCELLED, answer="", by_user=by_user, by_key=by_key,
                        via=via)
        return wake_run(locked, payload={"cancelled": True})


def close(escalation: Escalation, *, status: str, answer: str, by_user, by_key: ApiKey | None, via: str) -> Escalation:
    """Lock the escalation (its run first) and close it; raises EscalationClosed when it is no longer open.

    Call inside a transaction: the locks hold until it ends, so a second answer waits and then finds it closed.
    """
    # Lock order run → escalation, as everywhere else (a worker's fence, cancelling a run): no deadlock.
    if escalation.run_id is not None:
        Run.objects.select_for_update(no_key=True).filter(pk=escalation.run_id).first()
    locked = Escalation.objects.select_for_update(no_key=True, of=("self",)).select_related("run").get(pk=escalation.pk)
    if locked.status != EscalationStatus.OPEN:
        raise EscalationClosed(f"escalation {locked.pk} is already {locked.status}")
    locked.status = status
    locked.answer = answer
    locked.answered_by = by_user
    locked.answered_by_key = by_key
    locked.answered_via = via
    locked.answered_at = clock.now(locked.run)
    locked.save(update_fields=["status", "answer", "answered_by", "answered_by_key", "answered_via", "answered_at"])
    return locked


def settle_send(message_id: int, *, sent: bool) -> None:
    message = OutboxMessage.objects.select_for_update(no_key=True).get(pk=message_id)
    if sent:
        message.mark_sent()
    else:
        message.mark_not_sent()
    message.save(update_fields=["status"])


def wake_run(escalation: Escalation, *, payload: dict) -> Episode | None:
    """Wake the escalation's run with a `human_answer` episode; None without a run or when the run has ended."""
    if escalation.run is None:
        return None
    payload = {"escalation_id": escalation.pk, "kind": escalation.kind, "prompt": escalation.prompt, **payload}
    try:
        return events.record_event(
            escalation.run, kind=EpisodeKind.HUMAN_ANSWER, payload=payload, dedupe_key=f"human:{escalation.pk}"
        )
    except events.RunEnded:
        # The answer is kept on the escalation; an ended run has nothing left to do with it.
        return None
