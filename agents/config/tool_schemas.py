"""JSON schemas of the agent's tools, in OpenAI function-calling form ({name, description, parameters}).

Enums carry this agent's own roles and task keys so a model cannot name a
recipient or task that does not exist; the ToolExecutor still checks
everything, since a schema is advice to the model, not a guarantee.
"""

from __future__ import annotations

from collections.abc import Callable

from agents.config.schema import AgentConfig

# schedule_followup may not sleep longer than this; the policy may shorten it further.
MAX_FOLLOWUP_S = 60 * 86400


def _tool(name: str, *, description: str, properties: dict, required: list[str] | None = None) -> dict:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }
    return {"name": name, "description": description, "parameters": parameters}


def _text(description: str, *, max_length: int | None = None) -> dict:
    schema = {"type": "string", "minLength": 1, "description": description}
    if max_length:
        schema["maxLength"] = max_length
    return schema


def _to_role(cfg: AgentConfig, *, channel: str) -> dict:
    roles = [c.role for c in cfg.contacts if channel in cfg.contact_channels(c)]
    return {"type": "string", "enum": roles, "description": f"Role of the run contact to reach by {channel}."}


def _send_email(cfg: AgentConfig) -> dict:
    properties = {
        "to_role": _to_role(cfg, channel="email"),
        "subject": _text("Subject line.", max_length=200),
        "body": _text("Plain-text body."),
    }
    description = "Send an email to a run contact. The runtime adds threading, reply-to and any opt-out text."
    return _tool("send_email", description=description, properties=properties)


def _send_sms(cfg: AgentConfig) -> dict:
    properties = {"to_role": _to_role(cfg, channel="sms"), "body": _text("Message text.", max_length=1600)}
    description = "Send an SMS to a run contact. Keep it short; the runtime appends the opt-out text."
    return _tool("send_sms", description=description, properties=properties)


def _send_slack(cfg: AgentConfig) -> dict:
    properties = {
        "to_role": _to_role(cfg, channel="slack"),
        "text": _text("Message text (Slack mrkdwn).", max_length=4000),
    }
    return _tool("send_slack", description="Send a Slack direct message to a run contact.", properties=properties)


def _place_call(cfg: AgentConfig) -> dict:
    properties = {
        "to_role": _to_role(cfg, channel="voice"),
        "brief": _text("What the call must achieve.", max_length=2000),
    }
    description = "Place a phone call to a run contact; a voice agent follows the brief and reports a transcript."
    return _tool("place_call", description=description, properties=properties)


def _ask_human(cfg: AgentConfig) -> dict:
    properties = {
        "question": _text("The question, with the context a human needs.", max_length=2000),
        "options": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "maxItems": 6,
            "description": "Answers to offer; empty for a free-text answer.",
        },
    }
    description = "Ask a human operator and wait for the answer. Use when stuck, on disputes, or for anything risky."
    return _tool("ask_human", description=description, properties=properties)


def _mark_task_done(cfg: AgentConfig) -> dict:
    properties = {
        "task_key": {"type": "string", "enum": [t.key for t in cfg.tasks], "description": "Key of the task."},
        "evidence_ref": _text("Id of the inbound message, attachment or human answer that proves it."),
    }
    description = "Claim a task is done; the runtime checks its done_when rule on the evidence first."
    return _tool("mark_task_done", description=description, properties=properties)


def _schedule_followup(cfg: AgentConfig) -> dict:
    properties = {
        "in_s": {"type": "integer", "minimum": 60, "maximum": MAX_FOLLOWUP_S, "description": "Seconds from now."},
        "at": {"type": "string", "format": "date-time", "description": "ISO 8601 time with offset."},
        "reason": _text("Why then, e.g. 'out of office until the 14th'.", max_length=500),
    }
    description = "Set when to follow up next instead of the ladder's timing. Give exactly one of in_s or at."
    return _tool("schedule_followup", description=description, properties=properties, required=["reason"])


def _record_promise(cfg: AgentConfig) -> dict:
    properties = {
        "task_key": {"type": "string", "enum": [t.key for t in cfg.tasks], "description": "The task it is about."},
        "due": {"type": "string", "format": "date",
                "description": "The date promised, YYYY-MM-DD, in the contact's own calendar."},
        "what": _text("What was promised, e.g. 'pay invoice INV-1042' or 'send the signed form'.", max_length=200),
        "quote": _text("The contact's words.", max_length=500),
    }
    description = ("Record a contact's commitment with a date ('we will pay on the 15th', 'I'll send it by Friday'). "
                   "Chasing pauses until the date plus a grace period, then the runtime checks; a promise does not "
                   "complete a task.")
    return _tool("record_promise", description=description, properties=properties)


def _record_absence(cfg: AgentConfig) -> dict:
    properties = {
        "to_role": {"type": "string", "enum": [c.role for c in cfg.contacts], "description": "Who is away."},
        "until": {"type": "string", "description": "When they are back: YYYY-MM-DD (their own calendar) or an "
                                                   "ISO 8601 time with offset."},
        "reason": _text("Their words, e.g. 'out of office until the 10th'.", max_length=500),
    }
    description = "Record that a contact is away until a date: nothing is sent to them before they are back."
    return _tool("record_absence", description=description, properties=properties)


def _note(cfg: AgentConfig) -> dict:
    description = "Write a note in the run's journal for humans; sends nothing."
    return _tool("note", description=description, properties={"text": _text("The note.")})


def _finish(cfg: AgentConfig) -> dict:
    description = "End this episode with a short summary of what happened and what comes next."
    return _tool(
        "finish", description=description, properties={"summary": _text("One or two sentences.", max_length=1000)}
    )


BUILDERS: dict[str, Callable[[AgentConfig], dict]] = {
    "send_email": _send_email,
    "send_sms": _send_sms,
    "send_slack": _send_slack,
    "place_call": _place_call,
    "ask_human": _ask_human,
    "mark_task_done": _mark_task_done,
    "schedule_followup": _schedule_followup,
    "record_promise": _record_promise,
    "record_absence": _record_absence,
    "note": _note,
    "finish": _finish,
}


def build(cfg: AgentConfig) -> list[dict]:
    """The schemas of the tools the config lists, in canonical order."""
    return [BUILDERS[name](cfg) for name in cfg.tool_names()]
