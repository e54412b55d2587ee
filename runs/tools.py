"""The agent's tools: validate a model's tool call, run it, journal it, and say what happened.

The model proposes; the runtime decides. Arguments are checked against the
tool's JSON schema in the plan; an unknown or unlisted tool is an error
result, never a crash. A task is marked done only when its `done_when` check
passes on evidence (runs.evidence). Outbound tools are in runs.outbound.

Tool results go back to the model and into the next request, whose hash is
the journal's replay key: a result must read the same when the episode is
re-executed (a send adopted from an earlier attempt reads "sent").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

import jsonschema

from runs import absences, evidence, leases, outbound, policy, promises
from runs.context import EpisodeContext
from runs.episode_records import escalate, record
from runs.llm.base import ToolCall
from runs.models import EscalationKind, JournalKind, TaskStatus
from runs.tool_session import ToolSession, error


def dispatch(ctx: EpisodeContext, call: ToolCall, *, session: ToolSession, flush: bool = True) -> dict:
    """Run one tool call; returns the JSON result for the model. Journals the call and the result.

    The call's entry waits for the tool's first fenced write (EpisodeContext.pending),
    and a tool writes before anything leaves the process (runs.tool_executor).
    With `flush=False` the result's entry waits too, for the loop's next write.
    """
    ctx.journal(JournalKind.TOOL_CALL, {"call_id": call.id, "name": call.name, "arguments": call.arguments})
    result = _run(ctx, call, session)
    ctx.journal(JournalKind.TOOL_RESULT, {"call_id": call.id, "name": call.name, "result": result})
    if flush:
        ctx.flush()
    return result


def _run(ctx: EpisodeContext, call: ToolCall, session: ToolSession) -> dict:
    spec = next((tool for tool in ctx.plan.get("tools") or [] if tool.get("name") == call.name), None)
    handler = HANDLERS.get(call.name)
    if handler is None or spec is None:
        return error(f"tool {call.name!r} is not available to this agent")
    problem = _invalid(spec.get("parameters") or {}, call.arguments)
    if problem:
        return error(f"invalid arguments for {call.name}: {problem}")
    return handler(ctx, call.arguments, session)


def _invalid(schema: dict, arguments: object) -> str:
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    if _surely_valid(schema, arguments):
        return ""
    failure = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if failure is None:
        return ""
    where = "/".join(str(part) for part in failure.absolute_path)
    return f"{where}: {failure.message}" if where else failure.message


# Keywords that only annotate (a format is not asserted without a format checker, as in _invalid).
_ANNOTATIONS = frozenset({"description", "title", "format", "default", "examples", "$comment"})
_PLAIN_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _surely_valid(schema: object, value: object) -> bool:
    """True when `value` passes `schema` by the few keywords tool schemas use (agents.config.tool_schemas);
    False when it fails, or when the schema says more than this reads: jsonschema then decides, and words it.

    Building a validator and walking it costs more than the rest of a tool call; almost every call is valid.
    """
    if not isinstance(schema, dict):
        return False
    for keyword, expected in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "type":
            ok = _is_type(value, expected)
        elif keyword == "properties":
            ok = isinstance(value, dict) and isinstance(expected, dict) and all(
                _surely_valid(expected[name], item) for name, item in value.items() if name in expected)
        elif keyword == "required":
            ok = isinstance(value, dict) and isinstance(expected, list) and all(name in value for name in expected)
        elif keyword == "additionalProperties":
            known = schema.get("properties", {})
            ok = (expected is False and isinstance(value, dict) and isinstance(known, dict)
                  and "patternProperties" not in schema and all(name in known for name in value))
        elif keyword == "enum":
            ok = (isinstance(value, str) and isinstance(expected, list)
                  and all(isinstance(each, str) for each in expected) and value in expected)
        elif keyword in ("minLength", "maxLength"):
            ok = isinstance(value, str) and _is_type(expected, "integer") and (
                len(value) >= expected if keyword == "minLength" else len(value) <= expected)
        elif keyword in ("minItems", "maxItems"):
            ok = isinstance(value, list) and _is_type(expected, "integer") and (
                len(value) >= expected if keyword == "minItems" else len(value) <= expected)
        elif keyword in ("minimum", "maximum"):
            ok = _is_type(value, "number") and _is_type(expected, "number") and (
                value >= expected if keyword == "minimum" else value <= expected)
        elif keyword == "items":
            ok = isinstance(value, list) and all(_surely_valid(expected, item) for item in value)
        else:
            return False
        if not ok:
            return False
    return True


def _is_type(value: object, name: object) -> bool:
    """JSON Schema's type, leaving out what needs a closer look (a float that is an integer, a list of types)."""
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "null":
        return value is None
    plain = _PLAIN_TYPES.get(name) if isinstance(name, str) else None
    return plain is not None and isinstance(value, plain)


# Internal tools ---------------------------------------------------------------------------------------------------


def _note(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    record(ctx, JournalKind.NOTE, {"text": args["text"]})
    session.outcome.notes.append(args["text"])
    return {"ok": True}


def _finish(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    session.outcome.finished = True
    session.stop = True
    open_keys = [t["key"] for t in ctx.plan.get("tasks", []) if t.get("required", True) and t["key"] in open_tasks(ctx)]
    # The run completes only when every required task is done; the follow-up policy decides the rest.
    return {"ok": True, "summary": args["summary"], "required_tasks_open": open_keys}


def _ask_human(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    question = args["question"].strip()
    task_key = _confirmation_task(ctx, question)
    found = escalate(ctx, kind=EscalationKind.QUESTION, prompt=question, options=list(args.get("options") or []),
                     context={"task_key": task_key} if task_key else None)
    session.outcome.escalated = True
    session.stop = True
    return {"ok": True, "escalation_id": found.pk, "status": "waiting for a human answer"}


def _confirmation_task(ctx: EpisodeContext, question: str) -> str:
    """The human_confirmation task this question asks about (its configured question is in it), or ''."""
    asked = question.casefold()
    for task in ctx.plan.get("tasks", []):
        done_when = task.get("done_when") or {}
        wanted = (done_when.get("question") or "").strip().casefold()
        if done_when.get("type") == "human_confirmation" and wanted and wanted in asked:
            return task["key"]
    return ""


def _mark_task_done(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    key = args["task_key"]
    spec = next((t for t in ctx.plan.get("tasks", []) if t["key"] == key), None)
    if spec is None:
        return error(f"no task {key!r} in this run")
    passed = settle_task(ctx, spec, evidence_ref=args.get("evidence_ref", ""))
    if passed is None or passed.passed:
        return {"ok": True, "task_key": key, "status": "done"}
    return error(f"task {key!r} stays open: {passed.reason}", task_key=key, status="open")


def settle_task(ctx: EpisodeContext, spec: dict, *, evidence_ref: str = "",
                held: dict | None = None) -> evidence.EvidenceResult | None:
    """Check a task's done_when on the run's evidence and mark it done when it passes. None: already done.

    `held` is evidence already gathered (runs.evidence.gather) by a caller settling several tasks.
    """
    key = spec["key"]
    if key in ctx.done_keys or any(t.key == key and t.status == TaskStatus.DONE for t in ctx.tasks):
        return None
    if held is None:
        held = evidence.gather(ctx.run_id, current=ctx.episode, checks=[(spec.get("done_when") or {}).get("type")],
                               episodes=ctx.facts.messages, contacts=ctx.contacts)
    result = evidence.check(spec.get("done_when") or {}, evidence=held, task_key=key,
                            contact_role=spec.get("contact_role"))
    if result.passed:
        done = {"check": spec["done_when"]["type"], "matched": result.matched, "source": result.source,
                "episode_id": ctx.episode.pk, "evidence_ref": evidence_ref}
        # Written by the episode's next fenced write (a send's, or its close, before the decision reads the tasks):
        # the evidence it rests on is already stored, so an attempt that dies first finds and settles it again.
        ctx.pending_riders.append(_done_rider(key, evidence=done, at=ctx.now))
        ctx.done_keys.add(key)
    return result


def _done_rider(key: str, *, evidence: dict, at: datetime) -> leases.Rider:
    """The open task `key` of the fenced run marked done, as a rider of a fenced write (runs.leases.Rider)."""
    name = f"task_done_{leases.tag()}"
    return leases.Rider(sql=f""",
{name} AS (
    UPDATE runs_task SET status = 'done', done_evidence = %({name}_evidence)s::jsonb, done_at = %({name}_at)s
     WHERE run_id = (SELECT id FROM fenced) AND key = %({name}_key)s AND status = 'open'
)""", params={f"{name}_evidence": json.dumps(evidence), f"{name}_at": at,  # noqa: S608 (constants; values are parameters)
              f"{name}_key": key})


def open_tasks(ctx: EpisodeContext) -> set[str]:
    """The run's open task keys. Only the lease holder changes tasks: the episode's snapshot plus its own changes."""
    return ctx.open_task_keys()


def _schedule_followup(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    if ("in_s" in args) == ("at" in args):
        return error("give exactly one of in_s or at")
    contact = chased_contact(ctx)
    tz = policy.resolve_timezone(ctx.plan, contact_tz=contact.timezone if contact else "",
                                 org_tz=ctx.run.organization.default_timezone)
    if "in_s" in args:
        requested = ctx.now + timedelta(seconds=args["in_s"])
    else:
        try:
            requested = datetime.fromisoformat(args["at"])
        except ValueError:
            return error(f"at: {args['at']!r} is not an ISO 8601 time")
        # A bare date or local time means the contact's (or policy's) zone; the window check moves it to opening.
        requested = requested if requested.tzinfo else requested.replace(tzinfo=tz)
    at = policy.clamp_defer(ctx.plan, requested=requested, now=ctx.now, tz=tz, run_id=ctx.run.offset_key)
    session.outcome.followup_override = at
    return {"ok": True, "followup_at": at.isoformat(), "moved_by_policy": at != requested, "reason": args["reason"]}


def chased_contact(ctx: EpisodeContext):
    """The contact of the first open required task (the one being chased), else the first contact."""
    pending = open_tasks(ctx)
    roles = [t.get("contact_role") for t in ctx.plan.get("tasks", []) if t["key"] in pending]
    return next((c for c in ctx.contacts if c.role in roles), None) or (ctx.contacts[0] if ctx.contacts else None)


def _record_promise(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    try:
        entry = promises.record(ctx, task_key=args["task_key"], due=args["due"], what=args["what"],
                                quote=args["quote"], outcome=session.outcome)
    except promises.PromiseError as problem:
        return error(str(problem))
    return {"ok": True, "task_key": entry["task_key"], "due": entry["due"], "check_at": entry["check_at"],
            "status": "chasing paused until check_at; the task stays open until its check passes"}


def _record_absence(ctx: EpisodeContext, args: dict, session: ToolSession) -> dict:
    try:
        entry = absences.record(ctx, role=args["to_role"], until=args["until"], reason=args["reason"],
                                outcome=session.outcome)
    except absences.AbsenceError as problem:
        return error(str(problem))
    return {"ok": True, "to_role": args["to_role"], "until": entry["until"],
            "status": "nothing is sent to this contact before until"}


def _send_outbound(ctx: EpisodeContext, args: dict, session: ToolSession, *, tool: str) -> dict:
    return outbound.send(ctx, args, session=session, tool=tool)


HANDLERS: dict[str, Callable[[EpisodeContext, dict, ToolSession], dict]] = {
    "send_email": partial(_send_outbound, tool="send_email"),
    "send_sms": partial(_send_outbound, tool="send_sms"),
    "send_slack": partial(_send_outbound, tool="send_slack"),
    "place_call": partial(_send_outbound, tool="place_call"),
    "ask_human": _ask_human,
    "mark_task_done": _mark_task_done,
    "schedule_followup": _schedule_followup,
    "record_promise": _record_promise,
    "record_absence": _record_absence,
    "note": _note,
    "finish": _finish,
}
