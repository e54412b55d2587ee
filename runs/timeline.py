"""A run's story in order: episodes, journal entries, sends and escalations as one list.

Read by the API timeline, the Studio run page and the simulator's printout.
Times are the run's clock (virtual in a simulation) where the row has one.
"""

from dataclasses import asdict, dataclass
from datetime import datetime

from runs.models import Episode, Escalation, JournalEntry, JournalKind, OutboxMessage, Run


@dataclass(frozen=True)
class TimelineItem:
    at: datetime
    type: str  # episode | journal | outbound | escalation
    kind: str
    summary: str
    ref: int
    channel: str = ""
    direction: str = ""  # in | out | ""

    def as_dict(self) -> dict:
        return asdict(self)


def timeline_for(run: Run, *, include_journal: bool = True) -> list[TimelineItem]:
    items = [_episode_item(episode) for episode in Episode.objects.filter(run=run)]
    items += [_outbound_item(message) for message in OutboxMessage.objects.filter(run=run)]
    items += [_escalation_item(escalation) for escalation in Escalation.objects.filter(run=run)]
    if include_journal:
        items += [_journal_item(entry) for entry in JournalEntry.objects.filter(run=run)]
    # Stable order: time, then episodes before what they caused.
    order = {"episode": 0, "journal": 1, "outbound": 2, "escalation": 3}
    return sorted(items, key=lambda item: (item.at, order[item.type], item.ref))


def _episode_item(episode: Episode) -> TimelineItem:
    payload = episode.payload or {}
    text = payload.get("text") or payload.get("answer") or payload.get("outcome") or ""
    attachments = payload.get("attachments") or []
    summary = f"{episode.kind} #{episode.seq} ({episode.status})"
    if text:
        summary += f": {_clip(str(text))}"
    if attachments:
        summary += f" [+{len(attachments)} attachment(s): {', '.join(a.get('filename', '?') for a in attachments)}]"
    inbound = episode.kind in ("inbound", "call_report")
    return TimelineItem(at=episode.due_at, type="episode", kind=episode.kind, summary=summary, ref=episode.pk,
                        channel=str(payload.get("channel") or ""), direction="in" if inbound else "")


def _outbound_item(message: OutboxMessage) -> TimelineItem:
    payload = message.payload or {}
    text = payload.get("subject") or payload.get("body") or payload.get("text") or payload.get("brief") or ""
    return TimelineItem(at=message.sent_at or message.created_at, type="outbound", kind=message.tool,
                        summary=f"→ {message.recipient} ({message.status}): {_clip(str(text))}",
                        ref=message.pk, channel=message.channel, direction="out")


def _escalation_item(escalation: Escalation) -> TimelineItem:
    return TimelineItem(at=escalation.raised_at or escalation.created_at, type="escalation", kind=escalation.kind,
                        summary=f"{escalation.get_kind_display()} ({escalation.status}): {_clip(escalation.prompt)}",
                        ref=escalation.pk)


def _journal_item(entry: JournalEntry) -> TimelineItem:
    data = entry.data or {}
    if entry.kind == JournalKind.MODEL_CALL:
        summary = f"model {entry.model_provider}/{entry.model_name} ({entry.tokens_in}+{entry.tokens_out} tokens)"
    else:
        summary = _clip(str(data.get("summary") or data.get("text") or data.get("tool") or data.get("reason") or data))
    return TimelineItem(at=entry.at, type="journal", kind=entry.kind, summary=summary, ref=entry.pk)


def _clip(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
