"""A run's story in order: episodes, journal entries, sends and escalations as one list.

Read by the API timeline, the Studio run page and the simulator's printout.
Times are the run's clock (virtual in a simulation) where the row has one.
Each item names the episode it belongs to; `by_episode` groups them for the
Studio. A summary is one readable line; `detail` is the whole of it, as
"name: value" lines (a tool call's arguments, a model's reply), never a repr.
"""

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
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
    episode: int | None = None  # the episode's id; None for what happened outside one (a human's answer)
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class EpisodeGroup:
    """One episode with what happened in it, or (`episode` None) a stretch of things outside any episode."""

    episode: TimelineItem | None
    items: list[TimelineItem] = field(default_factory=list)


def timeline_for(run: Run, *, include_journal: bool = True) -> list[TimelineItem]:
    return timeline_of(Episode.objects.filter(run=run), OutboxMessage.objects.filter(run=run),
                       Escalation.objects.filter(run=run),
                       JournalEntry.objects.filter(run=run) if include_journal else ())


def timeline_of(episodes: Iterable[Episode], sends: Iterable[OutboxMessage], escalations: Iterable[Escalation],
                entries: Iterable[JournalEntry] = ()) -> list[TimelineItem]:
    """`timeline_for` of rows already read (all of the run's rows of each kind)."""
    items = [_episode_item(episode) for episode in episodes]
    items += [_outbound_item(message) for message in sends]
    items += [_escalation_item(escalation) for escalation in escalations]
    items += [_journal_item(entry) for entry in entries]
    # Stable order: time, then episodes before what they caused.
    order = {"episode": 0, "journal": 1, "outbound": 2, "escalation": 3}
    return sorted(items, key=lambda item: (item.at, order[item.type], item.ref))


def by_episode(items: list[TimelineItem]) -> list[EpisodeGroup]:
    """Group a timeline (in order) by episode: each episode once, where it starts; what happened outside an
    episode in its own groups, where it happened."""
    groups: list[EpisodeGroup] = []
    of_episode: dict[int, EpisodeGroup] = {}
    for item in items:
        if item.episode is None:
            if not groups or groups[-1].episode is not None:
                groups.append(EpisodeGroup(episode=None))
            groups[-1].items.append(item)
            continue
        group = of_episode.get(item.episode)
        if group is None:
            group = of_episode[item.episode] = EpisodeGroup(episode=None)
            groups.append(group)
        if item.type == "episode":
            group.episode = item
        else:
            group.items.append(item)
    return groups


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
    detail = readable({key: value for key, value in payload.items() if value not in ("", None, [], {})})
    if episode.error:
        detail += f"\nerror: {episode.error}"
    return TimelineItem(at=episode.due_at, type="episode", kind=episode.kind, summary=summary, ref=episode.pk,
                        channel=str(payload.get("channel") or ""), direction="in" if inbound else "",
                        episode=episode.pk, detail=detail.strip())


def _outbound_item(message: OutboxMessage) -> TimelineItem:
    payload = message.payload or {}
    text = payload.get("subject") or payload.get("body") or payload.get("text") or payload.get("brief") or ""
    return TimelineItem(at=message.sent_at or message.created_at, type="outbound", kind=message.tool,
                        summary=f"→ {message.recipient} ({message.status}): {_clip(str(text))}",
                        ref=message.pk, channel=message.channel, direction="out", episode=message.episode_id,
                        detail=readable({"to": message.recipient, **payload}))


def _escalation_item(escalation: Escalation) -> TimelineItem:
    return TimelineItem(at=escalation.raised_at or escalation.created_at, type="escalation", kind=escalation.kind,
                        summary=f"{escalation.get_kind_display()} ({escalation.status}): {_clip(escalation.prompt)}",
                        ref=escalation.pk, episode=escalation.episode_id,
                        detail=readable({"prompt": escalation.prompt, "answer": escalation.answer})
                        if escalation.answer else escalation.prompt)


def _journal_item(entry: JournalEntry) -> TimelineItem:
    data = entry.data or {}
    detail = readable(data)
    if entry.kind == JournalKind.MODEL_CALL:
        summary = f"model {entry.model_provider}/{entry.model_name} ({entry.tokens_in}+{entry.tokens_out} tokens)"
    elif entry.kind in (JournalKind.TOOL_CALL, JournalKind.TOOL_RESULT) and data.get("name"):
        shown = data.get("arguments") if entry.kind == JournalKind.TOOL_CALL else data.get("result")
        summary = _clip(f"{data['name']}: {_one_line(shown)}" if shown not in (None, "", {}) else data["name"])
        detail = readable(shown) if isinstance(shown, dict) else str(shown if shown is not None else "")
    else:
        text = data.get("summary") or data.get("text") or data.get("tool") or data.get("reason")
        summary = _clip(str(text) if text else _one_line(data))
    return TimelineItem(at=entry.at, type="journal", kind=entry.kind, summary=summary, ref=entry.pk,
                        episode=entry.episode_id, detail=detail)


def readable(value: object, *, indent: str = "") -> str:
    """`value` as "name: value" lines, nested values indented; text as written, never a Python repr."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:\n{readable(item, indent=indent + '  ')}")
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(f"{indent}- {readable(item, indent=indent + '  ').lstrip()}" if isinstance(item, (dict, list))
                         else f"{indent}- {_scalar(item)}" for item in value)
    return f"{indent}{_scalar(value)}"


def _one_line(value: object) -> str:
    """A dict as "name: value; name: value" on one line (clipped by the caller)."""
    if isinstance(value, dict):
        return "; ".join(f"{key}: {_one_line(item) if isinstance(item, (dict, list)) else _scalar(item)}"
                         for key, item in value.items())
    if isinstance(value, list):
        return ", ".join(_one_line(item) if isinstance(item, (dict, list)) else _scalar(item) for item in value)
    return _scalar(value)


def _scalar(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, default=str, ensure_ascii=False)


def _clip(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
