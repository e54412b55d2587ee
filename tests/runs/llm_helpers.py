"""The model layer's test requests: the plan's tools, a chat request, a journaled call that records its waits."""

from datetime import UTC, datetime

from runs.llm import journaled
from runs.llm.base import ChatRequest, function_tools

AT = datetime(2026, 3, 3, 15, 0, tzinfo=UTC)
EMPTY = {"type": "object", "properties": {}}
PLAN_TOOLS = [
    {"name": "send_email", "description": "Send an email.", "parameters": {
        "type": "object", "properties": {"to_role": {"type": "string"}, "subject": {"type": "string"},
                                         "body": {"type": "string"}}}},
    *({"name": name, "description": name, "parameters": EMPTY}
      for name in ("send_sms", "ask_human", "mark_task_done", "schedule_followup", "note", "finish")),
]


def chat_request(text: str = "hello", **overrides) -> ChatRequest:
    fields = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}],
              "tools": function_tools(PLAN_TOOLS), "temperature": 0.2, "metadata": {"event": {"kind": "start"}}}
    return ChatRequest(**{**fields, **overrides})


class Sleeps(list):
    """An injectable sleep that records waits instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def call_model(provider, run, epoch, episode, request, *, occurrence=1, sleep=None):
    return journaled.call_model(run_id=run.pk, epoch=epoch, episode_id=episode.pk, provider=provider,
                                request=request, at=AT, occurrence=occurrence,
                                sleep=sleep if sleep is not None else Sleeps())
