"""The placeholder language of message templates: `{contact.name}`, `{inputs.invoice_number}`, `{attempt}`.

One grammar for the validator and for whoever renders templates (the scripted
model), so a template that validates renders the same everywhere. `{{` and
`}}` are literal braces. Known names:

- `contact.name`, `contact.first_name`, `contact.role`, `contact.email`, `contact.phone`
- `agent.name`, `org.name`, `run.goal`
- `task.key`, `task.title`: the task being chased; `tasks.open`: titles of the open required tasks
- `inputs.<key>`: a run input the config declares
- `attempt`: the outreach number, 1 for the first message
- `human.answer`: what a human last recorded for this run
- `promise.due`, `promise.what`: the contact's latest promise (runs.promises), e.g. "on 2030-01-15"
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from difflib import get_close_matches

FIELDS: dict[str, tuple[str, ...] | None] = {
    "contact": ("name", "first_name", "role", "email", "phone"),
    "agent": ("name",),
    "org": ("name",),
    "run": ("goal",),
    "task": ("key", "title"),
    "tasks": ("open",),
    "human": ("answer",),
    "promise": ("due", "what"),
    "attempt": (),
    "inputs": None,  # any declared input key
}
KNOWN = tuple(
    f"{root}.{attr}" if attr else root for root, attrs in FIELDS.items() for attr in attrs or ("",) if attrs is not None
)

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[a-z_]+(?:\.[a-z0-9_]+)?")


class PlaceholderError(ValueError):
    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def find(text: str) -> list[str]:
    """The placeholder names in `text`, in order; raises PlaceholderError on a stray brace."""
    names = []
    for token in _TOKEN.finditer(text):
        if token.group(0) in ("{{", "}}"):
            continue
        if token.group(1) is None:
            raise PlaceholderError(f"unmatched {token.group(0)!r} at character {token.start()}", hint="write {{ or }}")
        names.append(token.group(1).strip())
    return names


def check(text: str, *, input_keys: Iterable[str] = ()) -> list[PlaceholderError]:
    """Every problem with the placeholders of `text`; empty when it renders."""
    try:
        names = find(text)
    except PlaceholderError as error:
        return [error]
    inputs = set(input_keys)
    return [error for name in names if (error := _check_name(name, inputs=inputs))]


def render(text: str, *, values: Mapping[str, object]) -> str:
    """Fill `text` from `values` keyed by full name ("contact.name"); a missing value renders empty."""

    def fill(token: re.Match[str]) -> str:
        if token.group(0) in ("{{", "}}"):
            return token.group(0)[0]
        if token.group(1) is None:
            return token.group(0)
        value = values.get(token.group(1).strip())
        return "" if value is None else str(value)

    return _TOKEN.sub(fill, text)


def _check_name(name: str, *, inputs: set[str]) -> PlaceholderError | None:
    if not _NAME.fullmatch(name):
        return PlaceholderError(f"{{{name}}} is not a placeholder", hint="write {root.field}, e.g. {contact.name}")
    root, _, attr = name.partition(".")
    if root == "inputs":
        if attr in inputs:
            return None
        return PlaceholderError(
            f"{{{name}}} cites an input the config does not declare",
            hint=f"declare it under inputs, or use one of: {', '.join(sorted(inputs)) or 'none declared'}",
        )
    if name in KNOWN:
        return None
    close = get_close_matches(name, KNOWN, n=1)
    hint = f"did you mean {{{close[0]}}}?" if close else f"use one of: {', '.join(KNOWN)}, inputs.<key>"
    return PlaceholderError(f"unknown placeholder {{{name}}}", hint=hint)
