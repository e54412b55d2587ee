"""What a finished simulated run did, read once: the facts every expectation check reads.

Below simulator.expectations and the check modules it delegates to
(simulator.message_checks, simulator.escalation_checks), which all read them.
Days count from the run's start as calendar dates in the organization's zone
(day 0 is the start date).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from agents.models import Organization
from connectors import addresses as address_forms
from runs import json_rows, leases, statements
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
    # The run's episodes, oldest first.
    episodes: list[Episode] = field(default_factory=list)
    # The last simulated day (day 0 is the start date).
    last_day: int = 41
    # Every outbox row and escalation of the run (drafts and approvals too), for its timeline.
    outbox: list[OutboxMessage] = field(default_factory=list)
    every_escalation: list[Escalation] = field(default_factory=list)

    def day(self, at: datetime) -> int:
        """The calendar day of `at` in the organization's zone, counted from the start date (day 0)."""
        return _day(at, start=self.start, zone=ZoneInfo(self.run.organization.default_timezone))

    def contact_for(self, message: OutboxMessage) -> Contact | None:
        return next((c for c in self.contacts if message.recipient in addresses(c, message.channel)), None)


# The run with its organization and the rows the checks and the timeline read (one JSON text column), for
# `gather`. Prepared (runs.statements): one text for every case a process simulates. Columns named, not `r.*`: a
# prepared statement's result keeps its shape.
ROWS_SQL = """SELECT __RUN_COLUMNS__, __ORGANIZATION__ AS organization_row, (SELECT json_build_object(
    'contacts', (SELECT coalesce(json_agg(c ORDER BY c.role, c.id), '[]') FROM runs_contact c
                  WHERE c.run_id = r.id),
    'tasks', (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM runs_task t WHERE t.run_id = r.id),
    'episodes', (SELECT coalesce(json_agg(e ORDER BY e.seq), '[]') FROM runs_episode e WHERE e.run_id = r.id),
    'outbox', (SELECT coalesce(json_agg(to_jsonb(o) || jsonb_build_object('episode_kind', e.kind) ORDER BY o.id), '[]')
                 FROM runs_outboxmessage o LEFT JOIN runs_episode e ON e.id = o.episode_id
                WHERE o.run_id = r.id),
    'escalations', (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM runs_escalation x
                     WHERE x.run_id = r.id),
    'sandbox_keys', (SELECT coalesce(json_object_agg(k.idem_key, k.n), '{}')
                       FROM (SELECT s.idem_key, count(*) AS n FROM connectors_sandboxmessage s
                              WHERE s.idem_key IN (SELECT o.idem_key FROM runs_outboxmessage o
                                                    WHERE o.run_id = r.id AND o.status = %(sent)s)
                              GROUP BY s.idem_key) k)
)::text) AS rows
  FROM runs_run r
 WHERE r.id = %(run)s"""
ROWS_SQL = ROWS_SQL.replace("__RUN_COLUMNS__", ", ".join(f"r.{field.column}" for field in Run._meta.concrete_fields)
                            ).replace("__ORGANIZATION__", leases.ORGANIZATION_COLUMN.format(run="r"))

# The organization's suppressions of the contacts' addresses, in Suppression's order; prepared (runs.statements),
# not an ORM query compiled anew for every case.
SUPPRESSIONS_SQL = """SELECT channel, address FROM connectors_suppression
 WHERE organization_id = %(organization)s AND address = ANY(%(addresses)s::varchar[])
 ORDER BY channel, address"""


def gather(run: Run, *, start: datetime, opt_outs: dict[tuple[str, str], datetime] | None = None,
           horizon: datetime | None = None) -> Facts:
    """Everything the checks read, in two queries: the run with its rows (ROWS_SQL), then the suppressions of its
    contacts' addresses. `horizon`: the first instant after the simulated weeks."""
    found = statements.fetch_instances(Run, ROWS_SQL, {"run": run.pk, "sent": OutboxStatus.SENT})
    if not found:
        raise Run.DoesNotExist(f"run {run.pk} does not exist")
    run = found[0]
    run.organization = json_rows.instance(Organization, run.organization_row)
    rows = json.loads(run.rows)
    contacts = json_rows.instances(Contact, rows["contacts"])
    outbox = []
    for row in rows["outbox"]:
        message = json_rows.instance(OutboxMessage, row)
        message.episode_kind = row["episode_kind"]
        outbox.append(message)
    sent = sorted((m for m in outbox if m.status == OutboxStatus.SENT), key=lambda m: (m.sent_at, m.pk))
    every_escalation = json_rows.instances(Escalation, rows["escalations"])
    wanted = {(channel, a) for c in contacts for channel in ADDRESS_FIELD for a in addresses(c, channel)}
    with statements.cursor() as cursor:
        cursor.execute(SUPPRESSIONS_SQL, {"organization": run.organization_id,
                                          "addresses": sorted({address for _, address in wanted})})
        suppressions = cursor.fetchall()
    suppressed = {(channel, address): (opt_outs or {}).get((channel, address), start)
                  for channel, address in suppressions if (channel, address) in wanted}
    return Facts(run=run, start=start, contacts=contacts, tasks=json_rows.instances(Task, rows["tasks"]), sent=sent,
                 # Drafts a human approves are the agent's settings, not the agent needing help: the scorecard
                 # counts them apart (metrics["approvals"]).
                 escalations=[e for e in every_escalation if e.kind != EscalationKind.APPROVAL],
                 suppressed=suppressed, sandbox_keys=Counter(rows["sandbox_keys"]),
                 episodes=json_rows.instances(Episode, rows["episodes"]),
                 last_day=_day(horizon - timedelta(microseconds=1), start=start,
                               zone=ZoneInfo(run.organization.default_timezone)) if horizon else 41,
                 outbox=outbox, every_escalation=every_escalation)


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
