"""The scripted model: deterministic, offline, free, and labelled as such (provider "scripted", "scripted-v1").

It decides only from the request: `metadata` (structured facts the loop
builds) and `messages` (the tool calls it already made in this episode and
their results, appended by the loop). No hidden state, no randomness: the same
request always gets the same reply. It answers one tool call per complete();
when its plan for the episode is done, it answers with content and no tool call.

The metadata it reads (all keys optional unless marked):

    now               ISO datetime, the run's clock for the episode (dates in "out until the 14th")
    event (required)  {kind: start|followup|inbound|human_answer|call_report|event,
                       channel, text, subject, attachments: [{filename, content_type, received}],
                       step: ladder step of a start/followup (0 = first message; null = an answer
                             deadline with nothing to send),
                       final: true on the last ladder step,
                       task_key: the task a follow-up chases / a human answer is about,
                       contact_role: who an inbound came from,
                       ref: the evidence id of the event (e.g. "episode:7"), cited by mark_task_done,
                       fields: {name: value} structured fields of a call report}
    tasks             [{key, title, status: open|done|cancelled, required, contact_role, done_when}]
    contacts          [{role, name, email, phone, slack_user, timezone, channels: [channel, ...]}]
    capabilities      [channel, ...]
    tools             [tool name, ...]   (default: the request's function tools)
    followup_channel  the channel the follow-up policy chose for outreach (default "email")
    scripted          the plan's model.scripted hints ({messages, tasks, intents})
    agent, org, run   {name}, {name}, {goal}; inputs: {key: value}   (template placeholders)
    human_answers     [str, ...] answers humans recorded for this run, oldest first
    acknowledge       every_reply | on_completion | never: which replies may get a message that asks nothing
    promise           {contact_role, task_key, due, what, broken_now, broken_count, check_at?}: the promise found
                      broken in this episode, else the contact's latest active one (runs.promises); null: none
    earlier_replies   [{seq, contact_role, text, attachments: n}] the contacts' earlier replies (inbound episodes)

The tool calls it makes, with the argument names of the plan's tool schemas
(agents/config/tool_schemas.py):

    send_email        {to_role, subject, body}
    send_sms          {to_role, body}
    send_slack        {to_role, text}
    place_call        {to_role, brief}
    mark_task_done    {task_key, evidence_ref}   (event.ref, else the attachments' names; the runtime checks
                                                  done_when on the evidence, not this claim)
    ask_human         {question, options}
    record_promise    {task_key, due: YYYY-MM-DD in the contact's calendar, what, quote}
    record_absence    {to_role, until: YYYY-MM-DD or ISO datetime, reason}
    schedule_followup {in_s, reason} or {at: ISO datetime, 09:00 in the contact's zone, reason}

A tool result the loop appends (role "tool", content JSON) counts as a failure
when it has `ok: false`, an `error`, or a `status` in FAILED_STATUSES; after a
failed send the model stops and leaves the next move to the runtime.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal

from runs.llm import scripted_rules
from runs.llm.base import ChatRequest, FrozenDict, ModelReply, ToolCall
from runs.llm.scripted_facts import SEND_TOOLS, Done, Facts, parse_json

MODEL_NAME = "scripted-v1"
PROVIDER = "scripted"
FAILED_STATUSES = {"blocked", "rejected", "failed", "error", "refused", "denied"}
FREE = Decimal(0)  # every reply's cost: one immutable value


class ScriptedProvider:
    name = PROVIDER

    def complete(self, request: ChatRequest) -> ModelReply:
        history = _history(request.messages)
        facts, (rule, actions) = _planned(request, history)
        step = len(history)
        failed = next((done for done in history if not done.ok and done.name in SEND_TOOLS.values()), None)
        raw = {"scripted": {"rule": rule, "step": step, "planned": [action.tool for action in actions]}}
        if (classified := scripted_rules.classification(facts)) is not None:
            raw["scripted"]["classification"] = classified
        if failed is None and step < len(actions):
            action = actions[step]
            call_id = "call_" + hashlib.sha256(f"{request.request_hash()}:{step}".encode()).hexdigest()[:16]
            return _reply(None, [ToolCall(id=call_id, name=action.tool, arguments=action.arguments)],
                          finish_reason="tool_calls", raw=raw)
        summary = f"{failed.name} failed; stopping for the runtime to decide" if failed else _summary(rule, history)
        return _reply(f"[scripted:{rule}] {summary}", [], finish_reason="stop", raw=raw)


# The last plan made for an episode whose plan ignores the history: (metadata, tool names, facts, plan). An
# episode's requests share one frozen metadata (runs.prompts) and come one after another, so its later requests
# find their plan here; a new episode's metadata is another object. Kept here, not on the metadata: the request's
# vocabulary (runs.llm.base) knows nothing of this model.
_last_plan: tuple[FrozenDict, list[str], Facts, scripted_rules.Plan] | None = None


def _planned(request: ChatRequest, history: list[Done]) -> tuple[Facts, scripted_rules.Plan]:
    """The request's facts and the episode's plan: a plan that does not read the history is made once per
    episode (for the same tools)."""
    global _last_plan
    metadata, tools = request.metadata, request.tool_names()
    kept = isinstance(metadata, FrozenDict) and scripted_rules.plans_without_history(
        (metadata.get("event") or {}).get("kind") or "")
    known = _last_plan  # read once: another thread may replace it
    if kept and known is not None and known[0] is metadata and known[1] == tools:
        return known[2], known[3]
    facts = Facts(request)
    planned = scripted_rules.plan(facts, history)
    if kept:
        _last_plan = (metadata, tools, facts, planned)
    return facts, planned


def _history(messages: list[dict]) -> list[Done]:
    """The tool calls made since the last user message (this episode's turn), with their results."""
    turn: list[dict] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        turn.append(message)
    if not turn:
        return []
    turn.reverse()
    results = {message.get("tool_call_id"): message.get("content") for message in turn if message.get("role") == "tool"}
    history = []
    for message in turn:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls or []:
            function = call.get("function", {})
            result = parse_json(results.get(call.get("id")))
            # The arguments stay as written until a rule reads them (Done.arguments): most plans never do.
            history.append(Done(name=function.get("name", ""), written=function.get("arguments") or "{}",
                                result=result, ok=_succeeded(result)))
    return history


def _succeeded(result: object) -> bool:
    if not isinstance(result, dict):
        return True  # a plain-text result carries no failure signal
    if result.get("ok") is False or result.get("error"):
        return False
    return str(result.get("status", "")).lower() not in FAILED_STATUSES


def _summary(rule: str, history: list[Done]) -> str:
    if not history:
        return "nothing to do for this event"
    return "done: " + ", ".join(done.name for done in history)


def _reply(content: str | None, tool_calls: list[ToolCall], *, finish_reason: str, raw: dict) -> ModelReply:
    return ModelReply(
        content=content, tool_calls=tool_calls, finish_reason=finish_reason, tokens_in=0, tokens_out=0,
        cost=FREE, model_name=MODEL_NAME, provider=PROVIDER, raw=raw,
    )
