"""The scripted model's rules: for each event, the tool calls of the episode, in order.

`plan(facts, history)` returns the whole list for the episode; the model emits
the entry at index len(history). A plan must not change under its own steps:
tasks already marked in `history` stay in it even when the loop reports them
done, so step n sees the same list as step 0 (results may only shape what
comes after them).

Replies (inbound, call reports), first match wins:

    intent             what the model does
    legal_threat       ask_human                      (hard stop, before opt-out keywords: "stop ... or I will sue")
    opt_out            ask_human                      (hard stop: evidence is not even looked at)
    dispute            ask_human                      (disputes, complaints, threats)
    injection          ask_human                      (never obeyed: the text is only quoted to a human)
    evidence           mark_task_done per matching task, then reply: thanks when every required task is
                       done, else ack (inbound only; the runtime checks done_when, not this model)
    out_of_office      record_absence until the parsed date / after the parsed delay (schedule_followup when the
                       agent lacks the tool; none parsed: nothing)
    wrong_person       ask_human                      (a new address is never contacted on a reply's say-so)
    request_from_us    ask_human                      (a fee, a form, a signature: chasing pauses)
    channel_request    reply ack on the channel asked for when the contact has an address there, else ask_human
    promise            record_promise with the date the text names (chasing pauses until it is checked)
    claim_done         reply `claim` ("it has not arrived: could you send it again?"); ask_human when the
                       sender already claimed it in an earlier reply, or the task needs a human's confirmation
    status_update      as acknowledgement ("All on track.")
    acknowledgement    reply ack when the plan has an `ack` template, else nothing ("not yet", "will do")
    unclassified       ask_human

Every answer to a reply that asks nothing (ack, thanks) follows the plan's
`acknowledge` (metadata "acknowledge"; runs.acknowledgements enforces it too).

Outreach (start, followup): one send per contact with open required tasks, on
the policy's channel; moment first (step 0), followup, or final. A follow-up
with step null is an answer deadline: nothing to send. A follow-up that finds
a promise broken (metadata "promise", broken_now) checks with `promise_check`
("did it go through?"); a second broken promise on the task goes to a human.
Human answers: a yes/no or stop answer sends nothing; otherwise chase again on
the follow-up moment, citing a free-text answer. API events: evidence marks only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from runs.llm import dates, scripted_intents, scripted_messages
from runs.llm.scripted_facts import SEND_TOOLS, Done, Facts

# schedule_followup's bound in the plan's tool schema (agents/config/tool_schemas.py).
MAX_FOLLOWUP_S = 60 * 86400
HARD_STOPS = ("legal_threat", "opt_out", "dispute", "injection")
REPLY_KINDS = ("inbound", "call_report", "event")
# Broken promises on one task before the model hands the contact to a human (runs.promises says the same).
BROKEN_PROMISES_BEFORE_HUMAN = 2

# ask_human wording and the options offered, by reason.
QUESTIONS: dict[str, tuple[str, list[str]]] = {
    "legal_threat": ("threatens legal action; automated contact is stopped.",
                     ["handle it myself", "stop contacting them"]),
    "opt_out": ("asked not to be contacted again.", ["stop contacting them", "continue"]),
    "dispute": ("disputes this or complains; automated contact is paused.", ["handle it myself", "continue"]),
    "injection": ("sent text that tries to instruct the agent; it was not followed.",
                  ["ignore the message and continue", "stop contacting them"]),
    "wrong_person": ("points to someone else or new contact details; they are not used until approved.",
                     ["use the new contact", "keep the current contact"]),
    "request_from_us": ("needs something from us (a fee, a form, a signature). Record what was done.", []),
    "channel_request": ("asks to be contacted on another channel.", ["switch channel", "keep the current channel"]),
    "unclassified": ("replied with something the agent cannot classify.", []),
    "promise_broken": ("has not kept their promises on this task; automated chasing is paused.",
                       ["handle it myself", "continue"]),
}
# Answers that settle something for the runtime (a confirmation, an uncertain send, a stop): nothing to send.
_NO_SEND_ANSWERS = {"", "yes", "no", "y", "n", "confirmed", "approved", "stop", "cancel", "stop contacting them",
                    "stop the run", "handle it myself", "do not contact", "don't contact them", "it was sent",
                    "it was not sent", "sent", "not_sent", "it is done", "it is not done: keep chasing"}
# Answers that only say "go on": chase again, without quoting them to the contact.
_PLAIN_ANSWERS = {"continue", "ok", "okay", "ignore the message and continue", "keep the current contact",
                  "keep the current channel", "use the new contact", "switch channel", "retry", "ignore"}


@dataclass(frozen=True)
class Action:
    tool: str
    arguments: dict


Plan = tuple[str, list[Action]]


def plan(facts: Facts, history: list[Done]) -> Plan:
    """(rule name, the episode's tool calls in order); calls to tools the agent lacks are left out."""
    planner = _PLANNERS.get(facts.kind, _unknown_event)
    rule, actions = planner(facts, history)
    return rule, [action for action in actions if action.tool in facts.tools]


def _outreach(f: Facts, history: list[Done]) -> Plan:
    if "step" in f.event and f.event["step"] is None:
        return "answer_deadline", []
    step = f.event.get("step") or 0
    moment = "first" if step == 0 else ("final" if f.event.get("final") else "followup")
    chased = f.task(f.event.get("task_key"))
    tasks = [chased] if chased and chased.get("status", "open") == "open" else _required(f.open_tasks())
    if not tasks:
        return "nothing_open", []
    promise = f.meta.get("promise") or {}
    if promise.get("broken_now") and f.kind == "followup":
        if promise.get("broken_count", 0) >= BROKEN_PROMISES_BEFORE_HUMAN:
            return "promise_broken_again", [_ask(f, "promise_broken", role=promise.get("contact_role"),
                                                 quote=f"they promised {promise.get('what') or 'it'} "
                                                       f"for {promise.get('due')}")]
        moment = "promise_check"
    first_per_role: dict[str | None, dict] = {}
    for task in tasks:
        first_per_role.setdefault(task.get("contact_role"), task)
    sends = [_send(f, task=task, moment=moment, preferred=f.event.get("channel")) for task in first_per_role.values()]
    return f"outreach_{moment}", [send for send in sends if send]


def _human_answer(f: Facts, history: list[Done]) -> Plan:
    answer = f.text.strip()
    tasks = _required(f.open_tasks())
    if not tasks:
        return "nothing_open", []
    plain = scripted_intents.normalize(answer).strip(" .!")
    if f.event.get("approval") == "rejected":
        # Guidance on a rejected draft is never quoted to the contact; the ladder's next step writes again.
        return "draft_rejected", []
    if plain in _NO_SEND_ANSWERS or scripted_intents.classify(answer) == "opt_out":
        return "answer_recorded", []
    chased = f.task(f.event.get("task_key"))
    task = chased if chased in tasks else tasks[0]
    cite = plain not in _PLAIN_ANSWERS
    send = _send(f, task=task, moment="followup", preferred=None, cite=cite, answer=answer)
    return "answer_followup", [send] if send else []


def classification(f: Facts) -> dict | None:
    """The reply's intent and the rule that fired (journaled with the model call), or None for other events."""
    if f.kind not in REPLY_KINDS:
        return None
    intent, rule = scripted_intents.classify_with_rule(f.text, extra=f.hints.get("intents"))
    return {"intent": intent, "rule": rule}


def _reply(f: Facts, history: list[Done]) -> Plan:
    sender = f.event.get("contact_role")
    intent = scripted_intents.classify(f.text, extra=f.hints.get("intents"))
    if f.kind != "event" and intent in HARD_STOPS:
        return intent, [_ask(f, intent)]
    marks = _evidence_marks(f, history, sender=sender)
    if marks:
        return "evidence", marks + _thanks_or_ack(f, history, marks, sender=sender)
    if f.kind == "event":
        return "event_without_evidence", []
    return intent, _REPLY_RULES[intent](f, intent, sender)


def _unknown_event(f: Facts, history: list[Done]) -> Plan:
    return f"unknown_event:{f.kind}", []


def _ask_rule(f: Facts, intent: str, sender: str | None) -> list[Action]:
    return [_ask(f, intent)]


def _out_of_office(f: Facts, intent: str, sender: str | None) -> list[Action]:
    tz = _zone(f.contact(sender).get("timezone"), fallback=f.now)
    when = scripted_intents.parse_availability(f.text, now=f.now, tz=tz)
    if not when:
        return []
    reason = f"{_who(f, sender)} is not available: {_quote(f)}"[:500]
    if "record_absence" in f.tools and f.now is not None:
        until = (f.now + timedelta(seconds=when["delay_s"])).isoformat() if "delay_s" in when else when["at"]
        return [Action("record_absence", {"to_role": f.contact(sender).get("role", ""), "until": until,
                                          "reason": reason})]
    if "delay_s" in when:
        return [Action("schedule_followup", {"in_s": min(max(when["delay_s"], 60), MAX_FOLLOWUP_S),
                                             "reason": reason})]
    day = date.fromisoformat(when["at"])
    # 09:00 where the contact lives: the policy then moves it into their send window, never earlier.
    at = datetime.combine(day, time(9, 0), tzinfo=_zone(f.contact(sender).get("timezone"), fallback=f.now))
    return [Action("schedule_followup", {"at": at.isoformat(), "reason": reason})]


def _claim_done(f: Facts, intent: str, sender: str | None) -> list[Action]:
    task = next(iter(_required(f.open_tasks(role=sender))), {})
    done_when = task.get("done_when") or {}
    if done_when.get("type") != "human_confirmation" and not _claimed_before(f, sender):
        # "I already sent it" with nothing attached: ask for it again before troubling a human.
        send = _send(f, task=task, moment="claim", preferred=f.event.get("channel"), role=sender) if task else None
        if send is not None:
            return [send]
    if done_when.get("type") == "human_confirmation":
        question, options = done_when.get("question") or f"Is {task.get('title')} done?", ["yes", "no"]
    else:
        question = f"A claim is not evidence: please check whether {task.get('title') or 'the task'} is done."
        options = ["it is done", "it is not done: keep chasing"]
    return [Action("ask_human", {"question": f"{_who(f, sender)} says it is done: {_quote(f)} {question}",
                                 "options": options})]


def _claimed_before(f: Facts, sender: str | None) -> bool:
    """Whether the sender already claimed it, with nothing attached, in an earlier reply of this run."""
    extra = f.hints.get("intents")
    return any(reply.get("contact_role") in (sender, "", None) and not reply.get("attachments")
               and scripted_intents.classify(reply.get("text") or "", extra=extra) == "claim_done"
               for reply in f.meta.get("earlier_replies") or [])


def _promise(f: Facts, intent: str, sender: str | None) -> list[Action]:
    task = next(iter(_required(f.open_tasks(role=sender))), None)
    contact = f.contact(sender)
    found = dates.find(f.text, today=_today(f, contact)) if f.now is not None else None
    if task is None or found is None or "record_promise" not in f.tools:
        return _acknowledgement(f, intent, sender)
    what = f"{task.get('title') or task.get('key')}"
    return [Action("record_promise", {"task_key": task["key"], "due": found.day.isoformat(), "what": what[:200],
                                      "quote": _quote(f)[:500]})]


def _today(f: Facts, contact: dict) -> date:
    """Today where the contact lives: "the 15th" is their 15th."""
    return f.now.astimezone(_zone(contact.get("timezone"), fallback=f.now)).date()


def _channel_request(f: Facts, intent: str, sender: str | None) -> list[Action]:
    contact = f.contact(sender)
    wanted = scripted_intents.requested_channel(f.text)
    address = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}.get(wanted or "", "")
    reachable = contact.get("channels") or [wanted]
    # Only an address the run already holds: a new one needs a human's approval first.
    if wanted and contact.get(address) and wanted in reachable and SEND_TOOLS[wanted] in f.tools:
        return _thanks_or_ack(f, [], [], sender=sender, channel=wanted)
    return [_ask(f, intent)]


def _acknowledgement(f: Facts, intent: str, sender: str | None) -> list[Action]:
    task = next(iter(_required(f.open_tasks(role=sender))), {})
    per_task = ((f.hints.get("tasks") or {}).get(task.get("key")) or {}).get("ack")
    if per_task or (f.hints.get("messages") or {}).get("ack"):
        return _thanks_or_ack(f, [], [], sender=sender)
    return []


_REPLY_RULES: dict[str, Callable[[Facts, str, str | None], list[Action]]] = {
    "out_of_office": _out_of_office,
    "wrong_person": _ask_rule,
    "request_from_us": _ask_rule,
    "channel_request": _channel_request,
    "promise": _promise,
    "claim_done": _claim_done,
    "status_update": _acknowledgement,
    "acknowledgement": _acknowledgement,
    "unclassified": _ask_rule,
}
_PLANNERS: dict[str, Callable[[Facts, list[Done]], Plan]] = {
    "start": _outreach,
    "followup": _outreach,
    "human_answer": _human_answer,
    "inbound": _reply,
    "call_report": _reply,
    "event": _reply,
}
# Planners that never read the history: the episode's plan is the same at every step (runs.llm.scripted reuses it).
_HISTORY_FREE = frozenset({_outreach, _human_answer, _unknown_event})


def plans_without_history(kind: str) -> bool:
    """Whether an event of `kind` is planned from the facts alone (`plan` ignores the history)."""
    return _PLANNERS.get(kind, _unknown_event) in _HISTORY_FREE


def _ask(f: Facts, reason: str, *, role: str | None = None, quote: str | None = None) -> Action:
    why, options = QUESTIONS[reason]
    who = _who(f, role or f.event.get("contact_role"))
    question = f"{who} {why} Their message: {_quote(f)}" if quote is None else f"{who} {why} ({quote})"
    new = scripted_intents.new_addresses(f.text, known=f.known_addresses())
    if new:
        question += f" Details offered, not used until approved: {', '.join(new)}."
    return Action("ask_human", {"question": question[:2000], "options": options})


def _evidence_marks(f: Facts, history: list[Done], *, sender: str | None) -> list[Action]:
    """mark_task_done for tasks the event may prove done; tasks already marked this episode stay listed."""
    keys = [done.arguments.get("task_key") for done in history if done.name == "mark_task_done"]
    candidates = f.open_tasks(role=sender)
    keys += [task["key"] for task in candidates if scripted_intents.may_prove(
        task.get("done_when") or {}, kind=f.kind, text=f.text, attachments=f.attachments,
        fields=f.event.get("fields") or {})]
    if not keys and f.attachments and f.kind == "inbound":
        # An attachment that fits no filter is still offered: the runtime's check has the last word.
        keys += [task["key"] for task in candidates if (task.get("done_when") or {}).get("type") ==
                 "attachment_received"][:1]
    ref = (f.event.get("ref") or ", ".join(a.get("filename") or "attachment" for a in f.attachments)
           or (f"episode #{f.event['seq']}" if f.event.get("seq") else f.kind))
    return [Action("mark_task_done", {"task_key": key, "evidence_ref": ref}) for key in dict.fromkeys(keys) if key]


def _thanks_or_ack(f: Facts, history: list[Done], marks: list[Action], *, sender: str | None,
                   channel: str | None = None) -> list[Action]:
    if f.kind != "inbound":
        return []
    accepted = {done.arguments.get("task_key") for done in history if done.name == "mark_task_done" and done.ok}
    done_keys = {task.get("key") for task in f.tasks if task.get("status") == "done"} | accepted
    all_done = all(task.get("key") in done_keys for task in f.tasks if task.get("required", True))
    marked = f.task(marks[0].arguments["task_key"]) if marks else None
    task = marked or next(iter(_required(f.open_tasks(role=sender))), None)
    if task is None:
        return []
    send = _send(f, task=task, moment="thanks" if all_done else "ack", preferred=channel or f.event.get("channel"),
                 role=sender, exclude=accepted)
    return [send] if send and _may_acknowledge(f, send, all_done=all_done) else []


def _may_acknowledge(f: Facts, send: Action, *, all_done: bool) -> bool:
    """The plan's `acknowledge` (runs.acknowledgements): a message that asks something always may go."""
    mode = f.meta.get("acknowledge") or "every_reply"
    text = " ".join(str(value) for value in send.arguments.values())
    return mode == "every_reply" or "?" in text or (mode == "on_completion" and all_done)


def _send(f: Facts, *, task: dict, moment: str, preferred: str | None, role: str | None = None,
          cite: bool = False, answer: str | None = None, exclude: set | frozenset = frozenset()) -> Action | None:
    contact = f.contact(role or task.get("contact_role"))
    channel = f.channel_for(contact, preferred=preferred)
    if channel is None:
        return None
    values = _values(f, contact=contact, task=task, answer=answer, exclude=exclude)
    message = scripted_messages.compose(hints=f.hints, moment=moment, task_key=task.get("key", ""),
                                        channel=channel, values=values, cite_human_answer=cite)
    return Action(SEND_TOOLS[channel], {"to_role": contact.get("role", ""), **message})


def _values(f: Facts, *, contact: dict, task: dict, answer: str | None, exclude: set | frozenset) -> dict:
    """Placeholder values (agents.config.placeholders names) from the metadata; `exclude`: tasks just marked done."""
    name = contact.get("name") or ""
    still_open = [t for t in _required(f.open_tasks(role=contact.get("role"))) if t.get("key") not in exclude]
    open_titles = [t.get("title") or t.get("key") for t in still_open]
    last_answer = f.human_answers[-1] if f.human_answers else None
    if isinstance(last_answer, dict):
        last_answer = last_answer.get("answer")
    values = {
        "contact.name": name or "there", "contact.first_name": name.split()[0] if name else "there",
        "contact.role": contact.get("role"), "contact.email": contact.get("email"),
        "contact.phone": contact.get("phone"),
        "agent.name": (f.meta.get("agent") or {}).get("name"), "org.name": (f.meta.get("org") or {}).get("name"),
        "run.goal": (f.meta.get("run") or {}).get("goal"), "task.key": task.get("key"),
        "task.title": task.get("title") or task.get("key"), "tasks.open": ", ".join(open_titles) or task.get("title"),
        "attempt": (f.event.get("step") or 0) + 1, "human.answer": answer or last_answer,
    }
    promise = f.meta.get("promise") or {}
    values.update({"promise.due": promise.get("due"), "promise.what": promise.get("what")})
    values.update({f"inputs.{key}": value for key, value in (f.meta.get("inputs") or {}).items()})
    return values


def _zone(name: str | None, *, fallback: datetime | None) -> tzinfo:
    try:
        return ZoneInfo(name) if name else (fallback.tzinfo if fallback and fallback.tzinfo else ZoneInfo("UTC"))
    except (KeyError, ValueError):
        return ZoneInfo("UTC")


def _required(tasks: list[dict]) -> list[dict]:
    return [task for task in tasks if task.get("required", True)] or tasks


def _who(f: Facts, role: str | None) -> str:
    contact = f.contact(role)
    return contact.get("name") or contact.get("role") or "The contact"


def _quote(f: Facts) -> str:
    text = " ".join(f.text.split())
    return f'"{text[:500]}"' if text else "(no text)"
