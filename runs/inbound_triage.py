"""A person settles an unmatched inbound message: attaches it to a run, or dismisses it.

Routing (runs.inbound_routing) keeps every message no open run took and opens
an `unmatched_inbound` Escalation for it. Here a person decides: attached, the
message becomes an inbound episode of the chosen run exactly as routing would
have made it; dismissed, it stays stored with who, when and why. Either way
the message's open triage escalation closes with the decision. The Studio's
inbound page calls `attach`/`dismiss`; an answer to the escalation itself
(the `attach_to_run` option registered here, or `dismiss`) reaches the same
functions through runs.answers.
"""

from __future__ import annotations

from django.db import transaction

from connectors import inbound
from connectors.models import Channel, InboundMessage, InboundStatus
from runs import answer_options, escalations, events, inbound_routing
from runs.answer_options import Answering, AnswerRefused
from runs.models import Episode, Escalation, EscalationKind, EscalationStatus, Run
from runs.models.run import OPEN_RUN_STATUSES


class TriageRefused(ValueError):
    """The message cannot be attached or dismissed as asked; the message says why and what to do."""


def candidate_runs(message: InboundMessage):
    """The runs a person may attach the message to: open runs of its organization, newest first (a real
    message never goes to a simulated run)."""
    runs = Run.objects.filter(status__in=OPEN_RUN_STATUSES).select_related("version__agent").order_by("-created_at")
    if message.organization_id is not None:
        runs = runs.filter(organization_id=message.organization_id)
    return runs if message.channel == Channel.SANDBOX else runs.filter(sim=False)


def attach(message: InboundMessage, run: Run, *, by_user, note: str = "", via: str = "admin") -> Episode | None:
    """Hand the unmatched message to `run` as routing would have; returns the inbound episode."""
    with transaction.atomic():
        locked = _lock_unmatched(message)
        if not candidate_runs(locked).filter(pk=run.pk).exists():
            raise TriageRefused(f"Run {run.pk} cannot take this message: choose an open run of the message's "
                                "organization (a real message never goes to a simulated run).")
        try:
            episode = inbound_routing.hand_to_run(locked, run, by_user=by_user, note=note.strip())
        except events.RunEnded as ended:
            raise TriageRefused(f"{ended}: choose an open run.") from ended
        _close_triage(locked, answer=f"Attached to run {run.pk}. {note}".strip(), by_user=by_user, via=via)
    return episode


def dismiss(message: InboundMessage, *, by_user, note: str, via: str = "admin") -> None:
    """No run needs the message: it stays stored, marked dismissed with who, when and why."""
    note = (note or "").strip()
    if not note:
        raise TriageRefused("Say why the message is dismissed (e.g. spam, a duplicate, handled by phone): "
                            "the reason is kept with who dismissed it and when.")
    with transaction.atomic():
        locked = _lock_unmatched(message)
        inbound.mark_dismissed(locked, by_user=by_user, note=note)
        _close_triage(locked, answer=f"Dismissed: {note}", by_user=by_user, via=via)


def _lock_unmatched(message: InboundMessage) -> InboundMessage:
    locked = InboundMessage.objects.select_for_update(no_key=True).get(pk=message.pk)
    if locked.status != InboundStatus.UNMATCHED:
        raise TriageRefused(f"This message is already {locked.status}: only unmatched messages are triaged.")
    return locked


def _close_triage(message: InboundMessage, *, answer: str, by_user, via: str) -> None:
    """Close the message's open triage escalation (none when the decision came as its answer)."""
    for escalation in Escalation.objects.filter(kind=EscalationKind.UNMATCHED_INBOUND, inbound_message_id=message.pk,
                                                status=EscalationStatus.OPEN):
        try:
            escalations.close(escalation, status=EscalationStatus.ANSWERED, answer=answer, by_user=by_user,
                              by_key=None, via=via)
        except escalations.EscalationClosed:
            pass  # answered meanwhile: the decision stands on the message


# Answers to an unmatched_inbound escalation --------------------------------------------------------------------


def _message_of(escalation: Escalation) -> InboundMessage:
    message = InboundMessage.objects.filter(pk=escalation.inbound_message_id).first()
    if message is None:
        raise AnswerRefused("this escalation's message is gone; dismiss the escalation")
    return message


def _check_attach(escalation: Escalation, text: str, data: dict) -> None:
    run_id = str(data.get("run_id") or "")
    if not run_id.isdigit():
        raise AnswerRefused("attach_to_run needs data.run_id: the id of an open run of this organization")
    if not candidate_runs(_message_of(escalation)).filter(pk=int(run_id)).exists():
        raise AnswerRefused(f"run {run_id} is not an open run of this organization")


def _attach_from_answer(answering: Answering) -> None:
    run = Run.objects.get(pk=int(answering.data["run_id"]))
    try:
        attach(_message_of(answering.escalation), run, by_user=answering.by_user, note=answering.text,
               via=answering.via)
    except TriageRefused as refused:
        raise AnswerRefused(str(refused)) from refused
    answering.done["run_id"] = run.pk
    return None


def dismiss_from_answer(answering: Answering) -> None:
    """runs.answers' `dismiss` on an unmatched_inbound escalation: the message is dismissed with it."""
    message = InboundMessage.objects.filter(pk=answering.escalation.inbound_message_id).first()
    if message is None or message.status != InboundStatus.UNMATCHED:
        return None
    note = answering.text or f"Dismissed with escalation {answering.escalation.pk}."
    dismiss(message, by_user=answering.by_user, note=note, via=answering.via)
    return None


answer_options.register(
    "attach_to_run", label="Attach to a run", kinds=[EscalationKind.UNMATCHED_INBOUND], act=_attach_from_answer,
    check=_check_attach, data={"run_id": "the open run of this organization the message belongs to (required)"},
    description="The message becomes an inbound episode of that run, as if it had been routed there.",
)
