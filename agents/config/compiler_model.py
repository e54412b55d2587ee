"""Compile the `model` section, filling the scripted model's template fallbacks.

The compiled templates are complete, so the scripted model never re-implements
the fallbacks: `final` is always set, every template has `subject` and
`short`, and `intents` holds the built-in phrases plus the config's own.
"""

from __future__ import annotations

from agents.config.schema_model import INTENTS, MOMENTS, MessageTemplate, ModelSpec, ScriptedHints

# Case-insensitive phrases, matched on word boundaries by the scripted model.
DEFAULT_INTENTS: dict[str, tuple[str, ...]] = {
    "out_of_office": ("out of office", "out of the office", "on vacation", "on leave", "away until", "auto-reply",
                      "automatic reply", "back on"),
    "opt_out": ("stop", "unsubscribe", "opt out", "do not contact", "don't contact", "remove me"),
    "dispute": ("dispute", "disagree", "incorrect", "wrong amount", "never received", "lawyer", "attorney",
                "complaint"),
    "claim_done": ("already sent", "already paid", "we paid", "has been paid", "i sent", "sent it",
                   "already submitted"),
    "wrong_person": ("wrong person", "not the right person", "no longer", "please contact", "reach out to"),
    "channel_request": ("text me", "call me", "email me", "slack me", "prefer email", "prefer text", "by phone"),
    "legal_threat": ("sue", "lawsuit", "legal action", "my lawyer", "my attorney"),
    "promise": (),  # phrases need a date in the same reply to count (runs.llm.scripted_intents.NEEDS_DATE)
    "status_update": ("on track", "on schedule", "all good"),
    "acknowledgement": (),
}  # fmt: skip


def compile_model(model: ModelSpec) -> dict:
    return {
        "provider": model.provider,
        "name": model.name,
        "temperature": model.temperature,
        "max_steps_per_episode": model.max_steps_per_episode,
        "budgets": model.budgets.model_dump(),
        "scripted": _scripted(model.scripted) if model.scripted else None,
    }


def _scripted(hints: ScriptedHints) -> dict:
    base = _moments({moment: getattr(hints.messages, moment) for moment in MOMENTS}, thread_subject=None)
    base["final"] = base["final"] or base["followup"]
    tasks = {}
    for key, overrides in hints.tasks.items():
        given = {moment: getattr(overrides, moment) for moment in MOMENTS}
        compiled = _moments(given, thread_subject=(base["first"] or {}).get("subject"))
        tasks[key] = {moment: template for moment, template in compiled.items() if template is not None}
    return {"messages": base, "tasks": tasks, "intents": _intents(hints.intents)}


def _moments(templates: dict[str, MessageTemplate | None], *, thread_subject: str | None) -> dict[str, dict | None]:
    first = templates.get("first")
    subject = first.subject.strip() if first and first.subject else thread_subject
    compiled: dict[str, dict | None] = {}
    for moment, template in templates.items():
        follows = subject if moment == "first" else _reply_subject(subject)
        compiled[moment] = _template(template, default_subject=follows) if template else None
    return compiled


def _reply_subject(subject: str | None) -> str | None:
    if subject is None or subject.lower().startswith("re:"):
        return subject
    return f"Re: {subject}"


def _template(template: MessageTemplate, *, default_subject: str | None) -> dict:
    body = template.body.strip()
    return {
        "subject": template.subject.strip() if template.subject else default_subject,
        "body": body,
        "short": template.short.strip() if template.short else body,
    }


def _intents(given: dict[str, list[str]]) -> dict[str, list[str]]:
    return {
        intent: sorted({p.strip().casefold() for p in (*DEFAULT_INTENTS[intent], *given.get(intent, []))})
        for intent in INTENTS
    }
