"""What the scripted model writes: the plan's `model.scripted` templates, else plain generic wording.

A moment's template is looked up in `tasks.<task_key>`, then in `messages`;
`final` falls back to `followup`. Email uses `subject` and `body` (a missing
subject after `first` becomes "Re: " plus the first subject, to keep the
thread); Slack uses `body`; SMS and call briefs use `short`, falling back to
`body`. Placeholders render with the config's own grammar (agents.config.placeholders).
"""

from __future__ import annotations

from agents.config import placeholders

GENERIC: dict[str, dict[str, str]] = {
    "first": {
        "subject": "{task.title}",
        "body": "Hello {contact.name},\n\nWe are reaching out about: {run.goal}\n"
                "Could you please send us the following: {tasks.open}?\n\nThank you,\n{org.name}",
        "short": "Hello {contact.name}, this is {org.name}. Could you please send us: {tasks.open}? Thank you.",
    },
    "followup": {
        "body": "Hello {contact.name},\n\nFollowing up on our earlier message: we are still waiting for "
                "{tasks.open}.\n\nThank you,\n{org.name}",
        "short": "Hello {contact.name}, a reminder from {org.name}: we still need {tasks.open}. Thank you.",
    },
    "final": {
        "body": "Hello {contact.name},\n\nThis is our last reminder: we still need {tasks.open}. "
                "Please reply to this message when you can.\n\nThank you,\n{org.name}",
        "short": "Hello {contact.name}, last reminder from {org.name}: we still need {tasks.open}.",
    },
    "ack": {
        "body": "Hello {contact.name},\n\nThank you for your reply. We still need: {tasks.open}.\n\n{org.name}",
        "short": "Thank you, {contact.name}. We still need: {tasks.open}.",
    },
    "thanks": {
        "body": "Hello {contact.name},\n\nThank you, we have received what we needed.\n\n{org.name}",
        "short": "Thank you, {contact.name}, we have received what we needed.",
    },
    "claim": {
        "body": "Hello {contact.name},\n\nThank you for letting us know. Nothing has reached us yet on our side: "
                "could you send it again, please?\n\n{org.name}",
        "short": "Thanks, {contact.name}. Nothing has reached us yet: could you send it again, please?",
    },
    "promise_check": {
        "body": "Hello {contact.name},\n\nYou let us know to expect it on {promise.due}, and it has not reached us "
                "yet. Did it go through?\n\nThank you,\n{org.name}",
        "short": "Hello {contact.name}, we expected it on {promise.due} and have not seen it yet. Did it go through?",
    },
}
# How a human's recorded answer is cited when the template does not place {human.answer} itself.
HUMAN_ANSWER_LINE = "\n\nAn update from our side: {human.answer}"


def compose(*, hints: dict | None, moment: str, task_key: str, channel: str, values: dict,
            cite_human_answer: bool = False) -> dict:
    """The tool arguments of one message, named as in the plan's tool schemas (agents/config/tool_schemas.py).

    {subject, body} for email, {body} for sms, {text} for slack, {brief} for calls.
    """
    template = _template(hints, moment=moment, task_key=task_key)
    body = template.get("body") or ""
    short = template.get("short") or body
    if cite_human_answer and values.get("human.answer"):
        body = _cite(body)
        short = _cite(short)
    if channel == "email":
        subject = template.get("subject")
        if not subject:
            first = _template(hints, moment="first", task_key=task_key)
            subject = "Re: " + (first.get("subject") or GENERIC["first"]["subject"])
        return {"subject": _render(subject, values), "body": _render(body, values)}
    if channel == "slack":
        return {"text": _render(body, values)}
    if channel == "voice":
        return {"brief": _render(short, values)}
    return {"body": _render(short, values)}


def _cite(text: str) -> str:
    """`text` with the human's answer: where the template puts it, else before the closing paragraph."""
    if "{human.answer}" in text:
        return text
    closing = text.rfind("\n\n")
    return text[:closing] + HUMAN_ANSWER_LINE + text[closing:] if closing > 0 else text + HUMAN_ANSWER_LINE


def _template(hints: dict | None, *, moment: str, task_key: str) -> dict:
    hints = hints or {}
    order = (moment, "followup") if moment == "final" else (moment,)
    for name in order:
        for source in ((hints.get("tasks") or {}).get(task_key) or {}, hints.get("messages") or {}):
            if source.get(name):
                return source[name]
    return GENERIC[moment]


def _render(text: str, values: dict) -> str:
    return placeholders.render(text, values=values).strip()
