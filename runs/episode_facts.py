"""What an episode reads of its run and organization, read once when it starts (runs.episode_loads).

The policy checks, the guardrail, the prompt, the ToolExecutor and the evidence checks ask these instead of the
database: suppressions, caps and the guardrail's known text are read once per episode, not once per send. They
are a snapshot of the episode's start; what the episode itself changes is kept up to date here by the code that
changes it (a new outbox row, a send counted against a cap). What a send must not miss from other writers (a STOP
or a human taking the run over since the start) is checked again by the statement that writes the row
(runs.outbox.open_row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from connectors import addresses
from connectors.models import Identity
from runs import json_rows
from runs.models import OutboxMessage


@dataclass
class EpisodeFacts:
    # The episode's own outbox rows by idempotency key, and the run's rows waiting to be sent or looked up.
    outbox_by_key: dict[str, OutboxMessage]
    unsettled: list[OutboxMessage]
    # When an earlier execution of this episode wrote its first journal entry (None: it never ran).
    first_entry_at: datetime | None
    # The run's human-answer episodes as (seq, payload), by seq.
    human_answers: list[tuple[int, dict]]
    # The run's inbound and call-report episodes: {id, seq, kind, status, payload}, by seq.
    messages: list[dict]
    # Stored inbound messages' headers by id, for the messages that name one (threading a reply).
    inbound_headers: dict[int, dict]
    # The journal before this episode (model calls left out), oldest first: {seq, kind, data, at}.
    history: list[dict]
    # Every identity of the organization (active or not), real ones first, as the start read them (rows by column
    # name: only an episode that sends asks for one, and only that one becomes an instance, `identity`).
    identity_rows: list[dict]
    # (channel, address) pairs of the run's contacts that the organization suppressed.
    suppressed: set[tuple[str, str]]
    # A human took the run over (an open `handoff` escalation).
    handed_off: bool
    # (created_at, sent_at) of the sends that count against per-contact caps, by recipient; None without caps.
    sends_by_recipient: dict[str, list[tuple[datetime, datetime | None]]] | None = None
    # The seq of each read outbox row's episode, by episode id (a held row's reply threads up to its episode).
    episode_seqs: dict[int, int] = field(default_factory=dict)
    # Rows this execution created, so a second look finds them without a query.
    created: list[OutboxMessage] = field(default_factory=list)
    # `identity`'s answers by channel.
    _identity_by_channel: dict[str, Identity | None] = field(default_factory=dict, init=False, compare=False,
                                                            repr=False)

    def is_suppressed(self, *, channel: str, address: str) -> bool:
        return (channel, addresses.normalize(channel, address)) in self.suppressed

    def identity(self, channel: str) -> Identity | None:
        """The organization's active identity on `channel`, a real one before a sandbox one (only its row becomes
        an instance: a send asks for one channel of an organization that may have many identities)."""
        if channel not in self._identity_by_channel:
            row = next((row for row in self.identity_rows if row["channel"] == channel and row["active"]), None)
            self._identity_by_channel[channel] = None if row is None else json_rows.instance(Identity, row)
        return self._identity_by_channel[channel]

    def answers_up_to(self, seq: int) -> list[dict]:
        return [payload or {} for answer_seq, payload in self.human_answers if answer_seq <= seq]

    def remember_row(self, message: OutboxMessage) -> None:
        self.outbox_by_key[message.idem_key] = message

    def count_send(self, message: OutboxMessage) -> None:
        """A row went `sending`: it counts against its recipient's caps from now on, in this episode too."""
        if self.sends_by_recipient is not None:
            self.sends_by_recipient.setdefault(message.recipient, []).append((message.created_at, message.sent_at))
