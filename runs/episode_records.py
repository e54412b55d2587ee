"""What an episode records as it goes: a journal entry written now, an escalation opened once per episode.

Below the tools, the ToolExecutor, the outbound tools and the compliance checks, which all record and escalate.
"""

from __future__ import annotations

from runs import escalations
from runs.context import EpisodeContext
from runs.models import Escalation


def record(ctx: EpisodeContext, kind: str, data: dict) -> None:
    """Journal an entry now (after any pending ones), in one fenced transaction."""
    ctx.journal(kind, data)
    ctx.flush()


def escalate(ctx: EpisodeContext, *, kind: str, prompt: str, options: list[str] | None = None,
             context: dict | None = None) -> Escalation:
    """Open an escalation once per episode: a re-executed episode finds the one it opened before."""
    with ctx.fence() as run:
        existing = Escalation.objects.filter(run_id=ctx.run_id, episode=ctx.episode, kind=kind, prompt=prompt).first()
        if existing is not None:
            return existing
        return escalations.open_escalation(
            run, kind=kind, prompt=prompt, options=options or (), context=context, episode=ctx.episode
        )
