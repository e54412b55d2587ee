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

from runs import evidence
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
    """Whether every required task is done once this episode settles: marked already, or passing its check on
    the evidence now (the runtime marks those at the episode's end, whatever order the model wrote in)."""
    required = [task for task in ctx.plan.get("tasks") or [] if task.get("required", True)]
    open_keys = ctx.open_task_keys()
    pending = [task for task in required if task["key"] in open_keys]
    if not required or not pending:
        return bool(required)
    if any(not (task.get("done_when") or {}).get("type") for task in pending):
        return False
    held = evidence.gather(ctx.run_id, current=ctx.episode, checks={task["done_when"]["type"] for task in pending},
                           episodes=ctx.facts.messages, contacts=ctx.contacts)
    return all(evidence.check(task["done_when"], evidence=held, task_key=task["key"],
                              contact_role=task.get("contact_role")).passed for task in pending)
