"""The one module that owns what a human's answer does: the built-in options and `answer`.

The API, the Studio and Slack buttons all call `answer(escalation, option=…)`.
The escalation row is locked (its run first) and closed in the same
transaction as the action, so a double-submitted answer acts once (the second
finds it closed: EscalationClosed). Every action is journaled on the run with
who acted and why. What each option does is in its `act` function below;
sends a human decides (send_anyway, reply_to_contact) go out in the episode
the answer wakes, through the outbox, by that episode's key (runs.human_sends).
"""

from __future__ import annotations

from django.db import transaction

from connectors import addresses, suppressions
from connectors.models import SuppressionReason
from runs import answer_options, cancellation, clock, contact_memory, escalations, events, inbound_triage, journal
from runs.answer_options import Answering, AnswerRefused
from runs.models import (
    Contact,
    EpisodeStatus,
    Escalation,
    EscalationKind,
    EscalationStatus,
    JournalKind,
    Run,
    Task,
    TaskStatus,
)
from runs.policy import memory

__all__ = ["AnswerRefused", "answer", "options_for"]

K = EscalationKind
ON_RUN = (K.QUESTION, K.STUCK, K.GUARDRAIL_BLOCK)
TOOL_CHANNEL = {"send_email": "email", "send_sms": "sms", "send_slack": "slack", "place_call": "voice"}
CHANNEL_TOOL = {"email": "send_email", "sms": "send_sms", "slack": "send_slack"}


def options_for(escalation: Escalation) -> list[dict]:
    return answer_options.options_for(escalation)


def answer(escalation: Escalation, *, option: str, text: str = "", data: dict | None = None,
           by_user=None, by_key=None, via: str) -> Escalation:
    """Act on the human's chosen option once; returns the closed escalation.

    Raises AnswerRefused (no option, one that does not fit, missing text or data,
    an unconfirmed reply) before anything is written, EscalationClosed when
    it was already answered.
    """
    data = data if isinstance(data, dict) else {}
    text = (text or "").strip()
    fitting = [fit.name for fit in answer_options.fitting(escalation)]
    if not option:
        raise AnswerRefused(f"choose an option: one of {', '.join(fitting) or 'none (this escalation takes none)'}")
    chosen = answer_options.get(option)
    if chosen is None or option not in fitting:
        raise AnswerRefused(f"option {option!r} does not fit this {escalation.kind} escalation; "
                            f"use one of {', '.join(fitting)}")
    if chosen.needs_text and not text:
        raise AnswerRefused(f"{option} needs text: {chosen.description or chosen.label}")
    if chosen.check is not None:
        chosen.check(escalation, text, data)
    with transaction.atomic():
        locked = escalations.close(escalation, status=chosen.closes_as, answer=text or chosen.label,
                                   by_user=by_user, by_key=by_key, via=via)
        run = locked.run  # read with the escalation's lock, after its run's (escalations.close)
        answering = Answering(escalation=locked, run=run, option=option, text=text, data=data, by_user=by_user,
                              by_key=by_key, via=via, at=clock.now(run) if run else clock.wall_now())
        wake = chosen.act(answering)
        if run is not None:
            _journal(answering)
        if wake is not None:
            escalations.wake_run(locked, payload={"option": option, **wake})
    return Escalation.objects.get(pk=locked.pk)


def _journal(answering: Answering) -> None:
    # The answer's transaction holds the run row (escalations.close locked it first).
    journal.write(answering.run, [journal.Entry(episode_id=None, kind=JournalKind.NOTE, at=answering.at, data={
        "human_answer": answering.option, "escalation_id": answering.escalation.pk, "text": answering.text,
        "data": answering.data, "by": answering.actor, **answering.done,
    })])


# Which contact an answer is about -------------------------------------------------------------------------------


def _contact(escalation: Escalation, data: dict) -> Contact | None:
    """data.role, else the contact the escalation is about (its recipient), else the run's only contact."""
    contacts = list(Contact.objects.filter(run_id=escalation.run_id))
    role = data.get("role") or (escalation.context or {}).get("contact_role")
    if role:
        return next((c for c in contacts if c.role == role), None)
    recipient = (escalation.context or {}).get("recipient")
    if recipient:
        for contact in contacts:
            if any(addresses.same(ch, recipient, getattr(contact, field))
                   for ch, field in contact_memory.ADDRESS_FIELDS.items()):
                return contact
    return contacts[0] if len(contacts) == 1 else None


def _require_contact(escalation: Escalation, data: dict) -> Contact:
    contact = _contact(escalation, data)
    if contact is None:
        roles = list(Contact.objects.filter(run_id=escalation.run_id).values_list("role", flat=True))
        raise AnswerRefused(f"name the contact: data.role, one of {', '.join(roles) or 'none (the run has none)'}")
    return contact


def _locked_contact(answering: Answering) -> Contact:
    contact = _require_contact(answering.escalation, answering.data)
    return Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)


def _check_channel(escalation: Escalation, text: str, data: dict) -> None:
    if data.get("channel") not in contact_memory.CHANNELS:
        raise AnswerRefused(f"data.channel must be one of {', '.join(contact_memory.CHANNELS)}")
    _require_contact(escalation, data)


# The options ----------------------------------------------------------------------------------------------------


def _resume(answering: Answering) -> dict:
    return {"answer": answering.text}


def _guide(answering: Answering) -> dict:
    # Kept apart from "answer": the agent reads it (runs.prompts) and never sends it.
    return {"answer": "", "guidance": answering.text}


def _stop_run(answering: Answering) -> None:
    reason = answering.text or f"stopped by a human (escalation {answering.escalation.pk})"
    cancellation.cancel_run(answering.run, reason=reason, by_user=answering.by_user, by_key=answering.by_key)
    answering.done["outcome"] = "cancelled"


def _check_channels(escalation: Escalation, text: str, data: dict) -> None:
    wanted = data.get("channels") or []
    if not isinstance(wanted, list) or any(channel not in contact_memory.CHANNELS for channel in wanted):
        raise AnswerRefused(f"data.channels must be a list of {', '.join(contact_memory.CHANNELS)} (empty: all)")
    _require_contact(escalation, data)


def _stop_contacting(answering: Answering) -> dict | None:
    contact = _locked_contact(answering)
    channels = answering.data.get("channels") or list(contact_memory.CHANNELS)
    organization = answering.run.organization
    why = answering.text or f"a human chose stop_contacting (escalation {answering.escalation.pk})"
    for channel in channels:
        address = getattr(contact, contact_memory.ADDRESS_FIELDS[channel])
        if address:
            # Reason "stop": the contact's wish, relayed by a human (who and why are in the history and journal).
            suppressions.suppress(organization, channel=channel, address=address, reason=SuppressionReason.STOP)
    contact_memory.opt_out(contact, channels=channels, at=answering.at, by=answering.actor, why=why)
    answering.done.update(contact=contact.role, channels=sorted(channels))
    if _anyone_reachable(answering.run):
        return {"answer": ""}
    cancellation.cancel_run(answering.run, reason=f"nobody left to contact: {why}", by_user=answering.by_user,
                            by_key=answering.by_key)
    answering.done["outcome"] = "cancelled"
    return None


def _anyone_reachable(run: Run) -> bool:
    """Whether a contact of the run still has an address the organization may use on a channel the agent has."""
    allowed = list(run.plan.get("capabilities") or contact_memory.CHANNELS)
    for contact in Contact.objects.filter(run_id=run.pk):
        blocked = memory.opted_out(contact.history)
        for channel in allowed:
            address = getattr(contact, contact_memory.ADDRESS_FIELDS.get(channel, ""), "")
            if (address and channel not in blocked
                    and not suppressions.is_suppressed(run.organization_id, channel=channel, address=address)):
                return True
    return False


def _handle_myself(answering: Answering) -> None:
    """The run waits on a new `handoff` escalation owned by this person; sends are blocked while it is open."""
    run = answering.run
    events.cancel_pending_followups(run)
    # Held sends wait too: their flush episodes are cancelled (a hand back reschedules what is due).
    run.episodes.filter(status=EpisodeStatus.QUEUED, payload__flush_outbox=True).update(
        status=EpisodeStatus.CANCELLED)
    owner = answering.actor
    who = getattr(answering.by_user, "get_username", lambda: "")() or f"API key {owner['key_id']}"
    handoff = escalations.open_escalation(
        run, kind=EscalationKind.HANDOFF,
        prompt=f"{who} is handling this run; the agent sends nothing. Mark it done, stop it, or hand it back.",
        context={"owner": owner, "from_escalation": answering.escalation.pk, **_task_context(answering.escalation)},
    )
    run.next_wake_at = events.earliest_due(run.pk)
    run.save(update_fields=["next_wake_at", "updated_at"])
    answering.done.update(owner=owner, handoff_escalation=handoff.pk)


def _task_context(escalation: Escalation) -> dict:
    key = (escalation.context or {}).get("task_key")
    return {"task_key": key} if key else {}


def _open_tasks(escalation: Escalation) -> list[str]:
    return list(Task.objects.filter(run_id=escalation.run_id, status=TaskStatus.OPEN).values_list("key", flat=True))


def _check_task(escalation: Escalation, text: str, data: dict) -> None:
    key = data.get("task_key") or (escalation.context or {}).get("task_key")
    open_keys = _open_tasks(escalation)
    if key is None and len(open_keys) == 1:
        return
    if key not in open_keys:
        raise AnswerRefused(f"data.task_key must name an open task: one of {', '.join(open_keys) or 'none'}")


def _mark_done(answering: Answering) -> dict:
    escalation = answering.escalation
    key = answering.data.get("task_key") or (escalation.context or {}).get("task_key") or _open_tasks(escalation)[0]
    evidence = {"check": "human_confirmation", "source": f"escalation:{escalation.pk}", "by": answering.actor,
                "at": answering.at.isoformat(), "note": answering.text}
    Task.objects.filter(run_id=escalation.run_id, key=key, status=TaskStatus.OPEN).update(
        status=TaskStatus.DONE, done_evidence=evidence, done_at=answering.at)
    answering.done["task_key"] = key
    return {"answer": "", "task_key": key}


def _retry(answering: Answering) -> None:
    failed = answering.escalation.episode
    again = events.record_event(answering.run, kind=failed.kind, payload=failed.payload,
                                dedupe_key=f"retry:{answering.escalation.pk}")
    answering.done["retry_of_episode"] = failed.seq
    answering.done["episode"] = again.seq if again else None


def _check_address(escalation: Escalation, text: str, data: dict) -> None:
    address = str(data.get("address") or "").strip()
    channel = data.get("channel") or ("email" if "@" in address else "sms")
    if not address or channel not in contact_memory.CHANNELS:
        raise AnswerRefused("use_contact needs data.address (and data.channel when it is not an email or phone)")
    if not addresses.normalize(channel, address):
        raise AnswerRefused(f"{address!r} is not a valid {channel} address")
    _require_contact(escalation, data)


def _use_contact(answering: Answering) -> dict:
    contact = _locked_contact(answering)
    address = str(answering.data["address"]).strip()
    channel = answering.data.get("channel") or ("email" if "@" in address else "sms")
    entry = contact_memory.change_address(contact, channel=channel, address=address, at=answering.at,
                                          by=answering.actor, why=answering.text or "approved by a human")
    if channel != _current_preference(contact):
        contact_memory.set_preference(contact, channel=channel, at=answering.at, by=answering.actor,
                                      why="the approved new address")
    answering.done.update(contact=contact.role, channel=channel, old=entry["old"], new=entry["new"])
    return {"answer": ""}


def _current_preference(contact: Contact) -> str | None:
    return memory.preferred_channel(contact.history)


def _switch_channel(answering: Answering) -> dict:
    contact = _locked_contact(answering)
    channel = answering.data["channel"]
    contact_memory.set_preference(contact, channel=channel, at=answering.at, by=answering.actor,
                                  why=answering.text or "a human switched the channel")
    answering.done.update(contact=contact.role, channel=channel)
    return {"answer": ""}


def _has_blocked_payload(escalation: Escalation) -> bool:
    context = escalation.context or {}
    return context.get("tool") in TOOL_CHANNEL and bool(context.get("recipient")) and isinstance(
        context.get("payload"), dict)


def _send_anyway(answering: Answering) -> dict:
    context = answering.escalation.context
    answering.done.update(tool=context["tool"], recipient=context["recipient"])
    return {"answer": "", "human_send": {"tool": context["tool"], "channel": TOOL_CHANNEL[context["tool"]],
                                         "recipient": context["recipient"], "payload": context["payload"],
                                         "override": True}}


def reply_preview(escalation: Escalation, text: str, data: dict) -> dict:
    """What reply_to_contact would send: {"tool", "channel", "role", "to", "payload"}; raises AnswerRefused."""
    contact = _require_contact(escalation, data)
    channel = data.get("channel") or memory.preferred_channel(contact.history) or next(
        (ch for ch in CHANNEL_TOOL if getattr(contact, contact_memory.ADDRESS_FIELDS[ch])), None)
    if channel not in CHANNEL_TOOL:
        raise AnswerRefused(f"data.channel must be one of {', '.join(CHANNEL_TOOL)}")
    address = getattr(contact, contact_memory.ADDRESS_FIELDS[channel])
    if not address:
        raise AnswerRefused(f"the {contact.role} contact has no {channel} address")
    if channel in memory.opted_out(contact.history):
        raise AnswerRefused(f"the {contact.role} contact opted out of {channel}")
    field_name = "text" if channel == "slack" else "body"
    payload = {field_name: text}
    if channel == "email":
        payload["subject"] = str(data.get("subject") or f"Re: {escalation.run.goal[:80]}")
    return {"tool": CHANNEL_TOOL[channel], "channel": channel, "role": contact.role, "to": address,
            "payload": payload}


def _check_reply(escalation: Escalation, text: str, data: dict) -> None:
    preview = reply_preview(escalation, text, data)
    if data.get("confirm") is not True:
        raise AnswerRefused("reply_to_contact sends your text to the contact exactly as written: "
                            "check the preview and answer again with data.confirm = true", preview=preview)


def _reply_to_contact(answering: Answering) -> dict:
    preview = reply_preview(answering.escalation, answering.text, answering.data)
    answering.done.update(tool=preview["tool"], recipient=preview["to"])
    return {"answer": "", "human_send": {"tool": preview["tool"], "channel": preview["channel"],
                                         "role": preview["role"], "payload": preview["payload"], "override": False}}


def _settle(sent: bool):
    def act(answering: Answering) -> dict:
        message_id = answering.escalation.outbox_message_id
        if message_id is not None:
            escalations.settle_send(message_id, sent=sent)
        outcome = "sent" if sent else "not_sent"
        answering.done["outcome"] = outcome
        return {"outcome": outcome, "outbox_message_id": message_id}
    return act


def _dismiss(answering: Answering) -> None:
    if answering.escalation.kind == K.UNMATCHED_INBOUND:
        inbound_triage.dismiss_from_answer(answering)  # the message is dismissed with its escalation
    return None


def _failed_episode(escalation: Escalation) -> bool:
    """A failed episode, or one the model failed in (runs.loop: it ended with nothing sent)."""
    if escalation.episode_id is None:
        return False
    return (escalation.episode.status == EpisodeStatus.FAILED
            or (escalation.context or {}).get("reason") == "model_error")


def _has_open_task(escalation: Escalation) -> bool:
    return escalation.run_id is not None and bool(_open_tasks(escalation))


CONTACT_ROLE = {"role": "the contact's role (optional when the escalation names one)"}
register = answer_options.register

register("resume", label="Continue (the follow-ups carry on)", kinds=[*ON_RUN, K.HANDOFF], act=_resume,
         description="The ladder continues; on a handed-over run, the agent takes it back. Optional text is "
                     "recorded as the answer.")
register("guide_agent", label="Guide the agent", kinds=ON_RUN, act=_guide, needs_text=True,
         description="Free text the agent reads on its next episode; it is never sent to the contact as is.")
register("reply_to_contact", label="Reply to the contact myself", kinds=ON_RUN, act=_reply_to_contact,
         needs_text=True, check=_check_reply,
         data={**CONTACT_ROLE, "channel": "email, sms or slack (default: the contact's preferred)",
               "subject": "email subject (optional)", "confirm": "true once the preview was checked (required)"},
         description="The text is sent to the contact exactly as written, once, after a confirmed preview.")
register("send_anyway", label="Send the blocked message anyway", kinds=[K.GUARDRAIL_BLOCK], act=_send_anyway,
         fits=_has_blocked_payload,
         description="The exact blocked message goes out once, marked as a human override.")
register("stop_contacting", label="Stop contacting them", kinds=ON_RUN, act=_stop_contacting,
         check=_check_channels, data={**CONTACT_ROLE, "channels": "list of email, sms, voice, slack (empty: all)"},
         description="The contact is suppressed for the organization on those channels; the run ends quietly "
                     "unless another contact remains.")
register("handle_myself", label="I'll handle it myself", kinds=ON_RUN, act=_handle_myself,
         description="The run stops all outreach and waits on you until you mark it done, stop it or hand it back.")
register("stop_run", label="Stop the run", kinds=[*ON_RUN, K.HANDOFF], act=_stop_run,
         description="Cancel the run; the text is the reason.")
register("mark_done", label="Mark the task done", kinds=[*ON_RUN, K.HANDOFF], act=_mark_done, check=_check_task,
         fits=_has_open_task, data={"task_key": "the task (optional when only one is open)"},
         description="You confirm the task is done; who, when and the text are its evidence.")
register("retry", label="Retry the failed episode", kinds=[K.STUCK], act=_retry, fits=_failed_episode,
         description="The failed episode runs again.")
register("use_contact", label="Use this new contact", kinds=ON_RUN, act=_use_contact, check=_check_address,
         data={**CONTACT_ROLE, "address": "the new email address or phone number (required)",
               "channel": "email, sms, voice or slack (default: from the address)"},
         description="The address replaces the contact's on that channel (the old one stays in its history); "
                     "the agent contacts it next.")
register("switch_channel", label="Switch channel", kinds=ON_RUN, act=_switch_channel, check=_check_channel,
         data={**CONTACT_ROLE, "channel": "email, sms, voice or slack (required)"},
         description="Sets the contact's preferred channel; the follow-ups use it from then on.")
register("sent", label="It was sent", kinds=[K.UNCERTAIN_SEND], act=_settle(True), closes_as=EscalationStatus.RESOLVED,
         description="The provider has it: the send is adopted.")
register("not_sent", label="It was not sent", kinds=[K.UNCERTAIN_SEND], act=_settle(False),
         closes_as=EscalationStatus.RESOLVED, description="The message goes out again by its own key.")
register("dismiss", label="Dismiss", kinds=[K.UNMATCHED_INBOUND, K.PROVIDER_OUTAGE], act=_dismiss,
         description="Nothing to do; the escalation closes.")
