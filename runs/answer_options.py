"""The registry of what a human may answer to an escalation: name → label, the kinds it fits, its action.

Below runs.escalations (which stores the options fitting a new escalation)
and runs.answers (which acts on the chosen one). Options register themselves
when their module is imported; runs.apps imports those modules at start-up,
so every process offers the same options. Another module adds one with a
single call:

    answer_options.register("approve", label="Approve the draft", kinds=["approval"], act=approvals.approve)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from runs.models import Escalation, Run


class AnswerRefused(ValueError):
    """The answer cannot be acted on as given; `message` says what is wrong and what to do (the API answers 400)."""

    def __init__(self, message: str, *, preview: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        # What a confirmation would send (reply_to_contact without confirm).
        self.preview = preview


@dataclass
class Answering:
    """One human answer being acted on: the escalation and run rows are locked for the action's transaction."""

    escalation: Escalation
    run: Run | None
    option: str
    text: str
    data: dict
    by_user: object | None
    by_key: object | None
    via: str
    at: datetime
    # What the action did, for the journal (the answer's own fields are added by runs.answers).
    done: dict = field(default_factory=dict)

    @property
    def actor(self) -> dict:
        """Who acted, as journals and histories record it."""
        return {"user_id": getattr(self.by_user, "pk", None), "key_id": getattr(self.by_key, "pk", None),
                "via": self.via}


@dataclass(frozen=True)
class Option:
    name: str
    label: str
    kinds: frozenset[str]
    # Returns the payload of the `human_answer` episode that wakes the run, or None when the run is not woken.
    act: Callable[[Answering], dict | None]
    description: str = ""
    # Schema hints for `data` (field → description), shown by the API and the Studio.
    data: dict = field(default_factory=dict)
    needs_text: bool = False
    # An extra condition on the escalation (a failed episode to retry, a blocked payload to send).
    fits: Callable[[Escalation], bool] | None = None
    # Raises AnswerRefused for a text/data combination the action cannot use (checked before any lock).
    check: Callable[[Escalation, str, dict], None] | None = None
    closes_as: str = "answered"


_REGISTRY: dict[str, Option] = {}


def register(name: str, *, label: str, kinds: Iterable[str], act: Callable[[Answering], dict | None],
             **more: object) -> Option:
    """Add (or replace, by name) an option; returns it."""
    option = Option(name=name, label=label, kinds=frozenset(kinds), act=act, **more)
    _REGISTRY[name] = option
    return option


def get(name: str) -> Option | None:
    return _REGISTRY.get(name)


def all_options() -> list[Option]:
    return list(_REGISTRY.values())


def fitting(escalation: Escalation) -> list[Option]:
    """The options that fit this escalation, in registration order."""
    return [option for option in _REGISTRY.values()
            if escalation.kind in option.kinds and (option.fits is None or option.fits(escalation))]


def options_for(escalation: Escalation) -> list[dict]:
    """What Escalation.options stores: [{"name", "label", "data": {...}}] for every fitting option."""
    return [{"name": option.name, "label": option.label, "data": dict(option.data),
             **({"needs_text": True} if option.needs_text else {})} for option in fitting(escalation)]
