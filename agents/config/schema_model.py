"""Which model drives the agent, its budgets, and the scripted model's templates.

`provider: default` means whatever `LUCIA_LLM` names at run time, so an agent
that may run on the scripted model should carry `scripted` hints.

The scripted model is deterministic and offline: it writes from templates and
classifies replies by phrases. For an outreach it picks a moment:

- `first`: ladder step 0;
- `followup`: ladder steps after the first;
- `final`: the last ladder step (falls back to `followup`);
- `ack`: answer to a reply that leaves required tasks open (optional);
- `thanks`: answer once every required task is done (optional);
- `claim`: answer to "I already sent it" when nothing arrived: ask them to send it again (optional);
- `promise_check`: the outreach after a promise's date (and its grace) passed with the task still open:
  "did it go through?" (optional; falls back to `followup`).

A moment's template is looked up in `tasks.<task_key>` for the task being
chased, then in `messages`. Email uses `subject` and `body` (a missing subject
after `first` becomes "Re: " plus the first subject, to keep the thread); Slack
uses `body`; SMS and the voice call brief use `short`, falling back to `body`.

Templates cite values as `{root.attr}` (see `placeholders.py`); `{{` and `}}`
are literal braces. `intents` lists case-insensitive phrases per reply intent;
they extend the built-in phrases in the compiled plan.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from agents.config.schema_base import Key, Strict, Text

Moment = Literal["first", "followup", "final", "ack", "thanks", "claim", "promise_check"]
MOMENTS: tuple[str, ...] = get_args(Moment)

Intent = Literal["out_of_office", "opt_out", "dispute", "claim_done", "wrong_person", "channel_request",
                 "legal_threat", "promise", "status_update", "acknowledgement"]
INTENTS: tuple[str, ...] = get_args(Intent)


class MessageTemplate(Strict):
    subject: Text | None = None
    body: Text
    short: Text | None = Field(default=None, max_length=480)


class Messages(Strict):
    first: MessageTemplate
    followup: MessageTemplate
    final: MessageTemplate | None = None
    ack: MessageTemplate | None = None
    thanks: MessageTemplate | None = None
    claim: MessageTemplate | None = None
    promise_check: MessageTemplate | None = None


class TaskMessages(Strict):
    """Per-task overrides; any moment may be left out."""

    first: MessageTemplate | None = None
    followup: MessageTemplate | None = None
    final: MessageTemplate | None = None
    ack: MessageTemplate | None = None
    thanks: MessageTemplate | None = None
    claim: MessageTemplate | None = None
    promise_check: MessageTemplate | None = None


class ScriptedHints(Strict):
    messages: Messages
    tasks: dict[Key, TaskMessages] = {}
    intents: dict[Intent, list[Text]] = {}


class Budgets(Strict):
    """Per-run ceilings; a run that reaches one escalates instead of continuing."""

    steps: int = Field(default=120, ge=1, le=10_000)
    tokens: int = Field(default=200_000, ge=1)
    cost_usd: float = Field(default=2.0, ge=0)


class ModelSpec(Strict):
    provider: Literal["default", "scripted", "openai"] = "default"
    name: str | None = None
    temperature: float = Field(default=0.2, ge=0, le=2)
    max_steps_per_episode: int = Field(default=6, ge=1, le=50)
    budgets: Budgets = Budgets()
    scripted: ScriptedHints | None = None
