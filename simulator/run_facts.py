"""What a finished simulated run did, read once: the facts every expectation check reads.

Below simulator.expectations and the check modules it delegates to
(simulator.message_checks, simulator.escalation_checks), which all read them.
Days count from the run's start as calendar dates in the organization's zone
(day 0 is the start date).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.db.models import F

from connectors import addresses as address_forms
from connectors.models import SandboxMessage, Suppression
from runs.models import Contact, Episode, Escalation, EscalationKind, OutboxMessage, OutboxStatus, Run, Task

ADDRESS_FIELD = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}


@dataclass
class Facts:
    run: Run
    start: datetime
    contacts: list[Contact]
    tasks: list[Task]
    sent: list[OutboxMessage]
    escalations: list[Escalation]
    # (channel, normalized address) -> when it became suppressed (the run's start when it already was).
    suppressed: dict[tuple[str, str], datetime]
    # Sandbox rows per idempotency key of this run's sends (a key stored twice was sent twice).
    sandbox_keys: Counter
    # The run's episodes (kind, status, due_at), oldest first.
    episodes: list[Episode] = field(default_factory=list)
    # The last simulated day (day 0 is the start date).
    last_day: int = 41

    def day(self, at: datetime) -> int:
        """The calendar day of `at` in the organization's zone, counted from the start date (day 0)."""
        return _day(at, start=self.start, zone=ZoneInfo(self.run.organization.default_timezone))

    def contact_for(self, message: OutboxMessage) -> Contact | None:
        return next((c for c in self.contacts if message.recipient in addresses(c, message.channel)), None)


def gather(run: Run, *, start: datetime, opt_outs: dict[tuple[str, str], datetime] | None = None,
           horizon: datetime | None = None) -> Facts:
    """Everything the checks read, in a few queries. `horizon`: the first instant after the simulated weeks."""
    run = Run.objects.select_related("organization").get(pk=run.pk)
    contacts = list(Contact.objects.filter(run_id=run.pk))
    sent = list(OutboxMessage.objects.filter(run_id=run.pk, status=OutboxStatus.SENT)
                .annotate(episode_kind=F("episode__kind")).order_by("sent_at", "pk"))
    wanted = {(channel, a) for c in contacts for channel in ADDRESS_FIELD for a in addresses(c, channel)}
    rows = Suppression.objects.filter(organization_id=run.organization_id,
                                      address__in={address for _, address in wanted})
    suppressed = {(row.channel, row.address): (opt_outs or {}).get((row.channel, row.address), start)
                  for row in rows if (row.channel, row.address) in wanted}
    keys = Counter(SandboxMessage.objects.filter(idem_key__in=[m.idem_key for m in sent])
                   .values_list("idem_key", flat=True))
    return Facts(run=run, start=start, contacts=contacts, tasks=list(Task.objects.filter(run_id=run.pk)), sent=sent,
                 # Drafts a human approves are the agent's settings, not the agent needing help: the scorecard
                 # counts them apart (metrics["approvals"]).
                 escalations=list(Escalation.objects.filter(run_id=run.pk).exclude(kind=EscalationKind.APPROVAL)
                                  .order_by("pk")),
                 suppressed=suppressed, sandbox_keys=keys,
                 episodes=list(Episode.objects.filter(run_id=run.pk).only("kind", "status", "due_at").order_by("seq")),
                 last_day=_day(horizon - timedelta(microseconds=1), start=start,
                               zone=ZoneInfo(run.organization.default_timezone)) if horizon else 41)


def _day(at: datetime, *, start: datetime, zone: ZoneInfo) -> int:
    return (at.astimezone(zone).date() - start.astimezone(zone).date()).days


def addresses(contact: Contact, channel: str) -> set[str]:
    """The contact's normalized addresses on `channel`, current and earlier (history keeps replaced values)."""
    field = ADDRESS_FIELD.get(channel)
    if field is None:
        return set()
    values = [getattr(contact, field)] + [entry.get(field) for entry in contact.history or []
                                          if isinstance(entry, dict)]
    return {_normalize(channel, value) for value in values if value}


def _normalize(channel: str, value: str) -> str:
    return address_forms.normalize(channel, value)
