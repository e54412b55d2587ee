"""What the approval-mode tests share: models that record or make one send, a run started under a plan's approval
settings, and its open approval."""

from __future__ import annotations

from decimal import Decimal

from runs import events, worker
from runs.llm.base import ChatRequest, ModelReply, ToolCall
from runs.models import Episode, EpisodeKind, EpisodeStatus, Escalation, EscalationKind, EscalationStatus, Run
from tests.runs import loop_helpers as h


class Recording(h.CountingProvider):
    """The scripted model, keeping every request's text so a test can see what the agent read."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def complete(self, request: ChatRequest) -> ModelReply:
        self.texts.append("\n".join(str(m.get("content") or "") for m in request.messages))
        return super().complete(request)


class Sender:
    """A model that makes one send (the given tool and arguments) in its first episode, then stops."""

    name = "scripted"

    def __init__(self, tool: str, arguments: dict) -> None:
        self.pending = [(tool, arguments)]

    def complete(self, request: ChatRequest) -> ModelReply:
        calls = []
        if request.messages[-1]["role"] != "tool" and self.pending:
            tool, arguments = self.pending.pop(0)
            calls = [ToolCall(id="call-1", name=tool, arguments=arguments)]
        return ModelReply(content=None if calls else "done", tool_calls=calls,
                          finish_reason="tool_calls" if calls else "stop", tokens_in=1, tokens_out=1,
                          cost=Decimal("0"), model_name="scripted", provider="scripted")


def plan(outbound: str = "all", **channels: str) -> dict:
    return h.template_plan(approvals={"outbound": outbound, "channels": channels})


def started(monkeypatch, plan: dict, provider=None) -> tuple[Run, Recording]:
    provider = provider or Recording()
    h.use_provider(monkeypatch, provider)
    run = h.make_run(plan)
    events.record_event(run, kind=EpisodeKind.START, payload={}, dedupe_key="start")
    return advanced_at(run, h.BUSINESS_HOURS), provider


def advanced_at(run: Run, now) -> Run:
    Run.objects.filter(pk=run.pk).update(virtual_now=now)
    worker.advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def open_approval(run: Run) -> Escalation:
    return Escalation.objects.get(run=run, kind=EscalationKind.APPROVAL, status=EscalationStatus.OPEN)


def next_followup(run: Run) -> Episode:
    return Episode.objects.filter(run=run, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED).get()
