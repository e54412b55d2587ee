"""Acknowledgements: whether the agent may answer a contact's reply with a message that asks nothing.

The plan's `acknowledge` (agents/config/schema.py) decides, and the
ToolExecutor's policy check obeys it for any model (runs.compliance):

- `every_reply`: every reply may be answered;
- `on_completion` (the default): only the message that closes the run, the
  thank-you once every required task is done;
- `never`: no acknowledgement at all.

An acknowledgement is a message sent in answer to a reply (an inbound message
or a call report) that asks the contact nothing: a message with a question
("we haven't received it: could you attach it again?") is a request, and
always may go. Outreach (start, follow-ups, human answers) is not an
acknowledgement. Plans compiled before the setting existed keep the old
behaviour, every reply: a pinned version never changes under a run.
"""

from __future__ import annotations

from runs.context import EpisodeContext
from runs.models import EpisodeKind

MODES = ("every_reply", "on_completion", "never")
# What a plan without the key (compiled before it existed) did.
LEGACY_MODE = "every_reply"
REPLY_KINDS = (EpisodeKind.INBOUND, EpisodeKind.CALL_REPORT)


def mode(plan: dict) -> str:
    value = plan.get("acknowledge")
    return value if value in MODES else LEGACY_MODE


def asks_something(text: str) -> bool:
    return "?" in text


def refusal(ctx: EpisodeContext, *, text: str) -> str | None:
    """Why this send may not go under the plan's `acknowledge`, or None when it may."""
    setting = mode(ctx.plan)
    if setting == "every_reply" or ctx.episode.kind not in REPLY_KINDS or asks_something(text):
        return None
    if setting == "on_completion" and completes_run(ctx):
        return None
    allowed = "the thank-you once every required task is done" if setting == "on_completion" else "nothing"
    return (f"not sent: acknowledge={setting} (answers to a reply that ask nothing: {allowed}); "
            "ask a question if the contact must act, or send nothing")


def completes_run(ctx: EpisodeContext) -> bool:
    """Whether every required task is done, counting those this episode marked."""
    required = [task for task in ctx.plan.get("tasks") or [] if task.get("required", True)]
    open_keys = ctx.open_task_keys()
    return bool(required) and not any(task["key"] in open_keys for task in required)
