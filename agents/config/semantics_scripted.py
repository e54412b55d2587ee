"""Cross-field rules for the scripted model's templates.

A template is checked like the message it becomes: its placeholders must
exist (inputs must be declared) and it must not contain a forbidden phrase,
since the policy would block every send made from it.
"""

from __future__ import annotations

from collections.abc import Iterator

from agents.config import placeholders
from agents.config.errors import ConfigError, format_path, suggest
from agents.config.shapes import as_list, as_map, names, strings

TEMPLATE_FIELDS = ("subject", "body", "short")


def check_scripted(data: dict) -> Iterator[ConfigError]:
    model = as_map(data.get("model"))
    scripted = model.get("scripted")
    if scripted is None:
        if model.get("provider", "default") in ("default", "scripted"):
            yield ConfigError(
                "model.scripted" if "model" in data else "model",
                "the scripted model needs message templates",
                "add model.scripted.messages with first and followup, or set model.provider: openai",
            )
        return
    if not isinstance(scripted, dict):
        return
    yield from _task_overrides(data, scripted=scripted)
    yield from _first_subject(data, scripted=scripted)
    yield from _short_texts(data, scripted=scripted)
    inputs = names(data, section="inputs", key="key")
    phrases = [p for p in strings(as_map(data.get("compliance")).get("forbidden_phrases")) if p.strip()]
    for loc, text in _templates(scripted):
        yield from _text(text, path=format_path(loc), inputs=inputs, phrases=phrases)


def _templates(scripted: dict) -> Iterator[tuple[list, str]]:
    """(location, text) of every template string under model.scripted."""
    base = ["model", "scripted"]
    groups = [([*base, "messages"], as_map(scripted.get("messages")))]
    groups += [([*base, "tasks", key], as_map(moments)) for key, moments in as_map(scripted.get("tasks")).items()]
    for loc, moments in groups:
        for moment, template in moments.items():
            for field in TEMPLATE_FIELDS:
                text = as_map(template).get(field)
                if isinstance(text, str):
                    yield [*loc, moment, field], text


def _text(text: str, *, path: str, inputs: list[str], phrases: list[str]) -> Iterator[ConfigError]:
    for problem in placeholders.check(text, input_keys=inputs):
        yield ConfigError(path, str(problem), problem.hint)
    lowered = text.casefold()
    for phrase in phrases:
        if phrase.casefold() in lowered:
            yield ConfigError(
                path, f"contains the forbidden phrase {phrase!r}", "reword it; the policy blocks such sends"
            )


def _task_overrides(data: dict, *, scripted: dict) -> Iterator[ConfigError]:
    if not isinstance(data.get("tasks"), list):
        return
    keys = names(data, section="tasks", key="key")
    for key in as_map(scripted.get("tasks")):
        if key not in keys:
            path = format_path(["model", "scripted", "tasks", str(key)])
            yield ConfigError(path, f"task {key!r} is not declared", suggest(key, known=keys, kind="task"))


def _first_subject(data: dict, *, scripted: dict) -> Iterator[ConfigError]:
    first = as_map(scripted.get("messages")).get("first")
    if "email" in strings(data.get("capabilities")) and isinstance(first, dict) and "subject" not in first:
        yield ConfigError(
            "model.scripted.messages.first.subject",
            "the first message needs a subject when the agent sends email",
            'add subject: "..." (later moments reuse it as "Re: ...")',
        )


def step_moment(index: int, *, steps: int) -> str:
    """The template moment ladder step `index` sends: first, followup, or final for the last step."""
    if index == 0:
        return "first"
    return "final" if index == steps - 1 else "followup"


def _short_texts(data: dict, *, scripted: dict) -> Iterator[ConfigError]:
    # An SMS or a call brief made from a whole email body would be unreadable; ask for `short`.
    messages = as_map(scripted.get("messages"))
    steps = as_list(as_map(data.get("followup")).get("steps"))
    reported = set()
    for index, step in enumerate(steps):
        channel = as_map(step).get("channel")
        if channel not in ("sms", "voice"):
            continue
        moment = step_moment(index, steps=len(steps))
        if moment == "final" and "final" not in messages:
            moment = "followup"
        template = messages.get(moment)
        if isinstance(template, dict) and "short" not in template and moment not in reported:
            reported.add(moment)
            yield ConfigError(
                format_path(["model", "scripted", "messages", moment, "short"]),
                f"followup.steps[{index}] sends this message by {channel}, which needs a short text",
                "add short: with an SMS-sized version (under 320 characters)",
            )
