"""Which run a stored inbound message belongs to, and handing it to that run.

Routing reads only addressing data — the reply-to token, our own Message-IDs,
the Slack thread, the phone number, the idempotency key in a callback URL —
never what the message says: inbound text is untrusted and only becomes
episode payload. A message no open run takes is kept and goes to triage (an
`unmatched_inbound` Escalation), never dropped. A message for a run that has
ended goes to triage too, with the run named, so a human sees a late answer.
"""

from __future__ import annotations

import functools
import hashlib
import logging

from agents.models import Organization
from connectors import addresses, attachments, inbound, message_ids
from connectors.models import Channel, InboundMessage
from runs import escalations, events, json_rows, leases, statements
from runs.models import Episode, EpisodeKind, OutboxMessage, OutboxStatus, Run

log = logging.getLogger(__name__)

DEDUPE_KEY_MAX = 200
TRIAGE_TEXT_CHARS = 500
# The run's columns routing reads: who it is and whose (triage names its organization). Not its plan (the whole
# compiled agent), inputs, state or goal: large JSON and text that would be fetched and parsed for nothing.
RUN_COLUMNS = ("id", "organization_id", "version_id", "deployment_id", "sim", "virtual_now", "external_ref", "status",
               "wake_when", "next_wake_at", "lease_owner", "lease_epoch", "lease_expires_at", "created_at",
               "updated_at", "ended_at")


def deliver(message: InboundMessage, *, organization: Organization | None) -> Episode | None:
    """Route a newly stored message: an episode on its run (returned), or triage (None).

    `organization` is the one whose identity received it (None when unknown:
    the email reply-to domain is Lucia's, not an organization's).
    """
    run = find_run(message, organization=organization)
    if run is None:
        triage(message, organization=organization, reason="no_run")
        return None
    try:
        return hand_to_run(message, run)
    except events.RunEnded:
        triage(message, organization=run.organization, reason="run_ended", run=run)
        return None


def hand_to_run(message: InboundMessage, run: Run, *, by_user=None, note: str = "") -> Episode | None:
    """The message becomes an inbound episode of `run` and is marked matched; raises events.RunEnded.

    `by_user`: a person attached an unmatched message (runs.inbound_triage); the episode is the same as routing
    would have made. None: the provider's id was already taken by an episode of this run.
    """
    episode = events.record_event(
        run, kind=episode_kind(message), payload=episode_payload(message), dedupe_key=dedupe_key(message)
    )
    inbound.mark_matched(message, run_id=run.pk, organization_id=run.organization_id, by_user=by_user, note=note)
    return episode


def find_run(message: InboundMessage, *, organization: Organization | None) -> Run | None:
    """The run the message answers, or None. Only runs of `organization` when it is known. One statement
    (find_run_sql); the run comes without its plan, inputs, state and goal (deferred: routing never reads them)."""
    params = _find_params(message, organization=organization)
    applies = tuple(name for name, _ in _LOOKUPS if params[name])
    if not applies:
        return None
    rows = statements.fetch_instances(Run, find_run_sql(applies), params)
    if not rows:
        return None
    run = rows[0]
    run.organization = json_rows.instance(Organization, run.organization_row)
    return run


# The candidates, most specific first, each the run its own lookup finds (the reply-to token's; the sender of the
# newest Message-ID in In-Reply-To/References that is ours; the send a callback's key names; the Slack thread's
# root; the newest open run with a contact at this number, or with this Slack user), kept when it is
# `organization`'s (any run when that is unknown); the first kept wins. A lookup that does not apply (a NULL
# parameter) is left out of the statement (find_run_sql). COALESCE evaluates its sub-selects in order and stops
# at the first run: the later lookups (a number's, over the organization's open runs' contacts) run only when the
# earlier ones found nothing.
_OURS = "(%(organization)s::bigint IS NULL OR r.organization_id = %(organization)s)"
_NEWEST_OPEN = """
    (SELECT r.id FROM runs_run r
      WHERE r.organization_id = %(organization)s AND r.status IN ('active', 'waiting', 'waiting_human')
        AND (%(sim)s::boolean IS NULL OR r.sim = %(sim)s) AND r.id IN (__CONTACTS__)
      ORDER BY r.created_at DESC, r.id DESC LIMIT 1)"""
# Only the organization's open runs' contacts are normalized (run_org_status index), not the whole table.
_BY_PHONE = _NEWEST_OPEN.replace("__CONTACTS__", """
        SELECT c.run_id FROM runs_contact c JOIN runs_run cr ON cr.id = c.run_id
         WHERE cr.organization_id = %(organization)s AND cr.status IN ('active', 'waiting', 'waiting_human')
           AND regexp_replace(c.phone, '[^0-9]', '', 'g') = %(phone)s""")
_BY_SLACK_USER = _NEWEST_OPEN.replace("__CONTACTS__",
                                      "SELECT c.run_id FROM runs_contact c WHERE c.slack_user = %(slack_user)s")
# Each lookup with the parameter that makes it apply (NULL, or an empty list of prefixes: it does not).
_LOOKUPS = (
    ("reply_run", f"""
        (SELECT r.id FROM runs_run r WHERE r.id = %(reply_run)s AND {_OURS})"""),  # noqa: S608 (constants)
    ("prefixes", f"""
        (SELECT r.id FROM runs_run r
          WHERE r.id = (SELECT o.run_id FROM unnest(%(prefixes)s::varchar[]) WITH ORDINALITY AS p(prefix, n)
                         CROSS JOIN LATERAL (
                             -- A range on the unique idem_key index (hex keys sort below "g"); LIKE could not use it.
                             SELECT o.run_id FROM runs_outboxmessage o
                              WHERE o.idem_key >= p.prefix AND o.idem_key < p.prefix || 'g'
                                AND starts_with(o.idem_key, p.prefix)
                              ORDER BY o.id LIMIT 1) o
                         ORDER BY p.n LIMIT 1) AND {_OURS})"""),  # noqa: S608 (constants)
    ("idem_key", f"""
        (SELECT r.id FROM runs_run r
          WHERE r.id = (SELECT o.run_id FROM runs_outboxmessage o WHERE o.idem_key = %(idem_key)s
                         ORDER BY o.id LIMIT 1) AND {_OURS})"""),  # noqa: S608 (constants)
    ("thread_ref", f"""
        (SELECT r.id FROM runs_run r
          WHERE r.id = (SELECT o.run_id FROM runs_outboxmessage o JOIN runs_run t ON t.id = o.run_id
                         WHERE o.channel = 'slack' AND o.provider_message_id = %(thread_ref)s
                           AND (%(organization)s::bigint IS NULL OR t.organization_id = %(organization)s)
                         ORDER BY o.created_at DESC LIMIT 1) AND {_OURS})"""),  # noqa: S608 (constants)
    ("phone", _BY_PHONE),
    ("slack_user", _BY_SLACK_USER),
)


@functools.cache
def find_run_sql(applies: tuple[str, ...]) -> str:
    """The statement that finds the run by the lookups that apply to a message (named by their parameter), in
    _LOOKUPS' order. Only those are in its text: a lookup left out cannot be pruned by the planner per execution,
    and a text with NULL-pruned branches was planned again at every execution (its generic plan costed every
    branch), which took longer than running it. Each combination is its own prepared statement."""
    lookups = ",".join(sql for name, sql in _LOOKUPS if name in applies)
    return f"""
WITH found AS (
    SELECT coalesce({lookups}
    ) AS id
)
SELECT {", ".join(f"r.{column}" for column in RUN_COLUMNS)},
       {leases.ORGANIZATION_COLUMN.format(run="r")} AS organization_row
  FROM found JOIN runs_run r ON r.id = found.id
"""  # noqa: S608 (constants; every value is a parameter)


def _find_params(message: InboundMessage, *, organization: Organization | None) -> dict:
    """find_run_sql's parameters: what each lookup looks for, NULL where it does not apply to this message."""
    headers = message.headers or {}
    email = message.channel in (Channel.EMAIL, Channel.SANDBOX)
    by_phone = organization is not None and (message.channel in (Channel.SMS, Channel.VOICE) or (
        message.channel == Channel.SANDBOX and message.from_address.startswith("+")))
    by_slack_user = organization is not None and (message.channel == Channel.SLACK or (
        message.channel == Channel.SANDBOX and _payload_channel(message) == Channel.SLACK))
    number = addresses.normalize_phone(message.from_address) if by_phone else ""
    return {
        "organization": organization.pk if organization is not None else None,
        # A real provider's message never reaches a simulated run (personas share no real numbers).
        "sim": None if message.channel == Channel.SANDBOX else False,
        "reply_run": message_ids.parse_reply_address(message.to_address) if email and message.to_address else None,
        "prefixes": message_ids.key_prefixes_in(headers.get("in_reply_to"), " ".join(headers.get("references") or []))
        if email else [],
        "idem_key": headers.get("idem_key") or None,
        "thread_ref": headers.get("thread_ref") or None,
        "phone": number.lstrip("+") if number else None,
        "slack_user": (message.from_address or None) if by_slack_user else None,
    }


def run_for_send(idem_key: str) -> Run | None:
    """The run of one of our sends, by the key a callback URL or tracking metadata carries."""
    sent = OutboxMessage.objects.filter(idem_key=idem_key).select_related("run__organization").first()
    return sent.run if sent else None


def triage(message: InboundMessage, *, organization: Organization | None, reason: str, run: Run | None = None) -> None:
    """Keep the message for a human. Without an organization there is nobody to ask: it stays
    unmatched in the inbound store (the admin lists it) and a warning is logged."""
    inbound.mark_unmatched(message, organization_id=organization.pk if organization else None,
                           run_id=run.pk if run else None)
    if organization is None:
        log.warning("inbound %s %s matched no organization", message.channel, message.pk)
        return
    sender = message.from_address or "an unknown sender"
    prompt = (f"A {message.channel} message from {sender} arrived for run {run.pk}, which has ended."
              if run else f"A {message.channel} message from {sender} matched no open run.")
    escalations.open_unmatched(organization, inbound_message_id=message.pk, prompt=prompt, context={
        "reason": reason, "channel": message.channel, "from": message.from_address, "to": message.to_address,
        "subject": message.subject, "text": message.text[:TRIAGE_TEXT_CHARS], "run_id": run.pk if run else None,
    })


def episode_kind(message: InboundMessage) -> str:
    return EpisodeKind.CALL_REPORT if message.kind == "call_report" else EpisodeKind.INBOUND


def episode_payload(message: InboundMessage) -> dict:
    headers = message.headers or {}
    payload = {
        "channel": _payload_channel(message),
        "text": message.text,
        "subject": message.subject,
        "from": message.from_address,
        # Descriptions with the stored rows' ids; the bytes stay in connectors.Attachment.
        # (None to read when the message lists none: connectors.attachments keeps one row per listed file.)
        "attachments": [attachments.describe(row) for row in message.files.order_by("pk")] if message.attachments
        else [],
        "headers": {"in_reply_to": headers.get("in_reply_to"), "references": headers.get("references") or []},
        "inbound_message_id": message.pk,
    }
    if message.kind == "call_report":
        payload["transcript"] = message.text
    return payload


def dedupe_key(message: InboundMessage) -> str:
    key = f"{message.channel}:{message.provider_id}"
    if len(key) <= DEDUPE_KEY_MAX:
        return key
    return f"{message.channel}:sha256:{hashlib.sha256(message.provider_id.encode()).hexdigest()}"


def _payload_channel(message: InboundMessage) -> str:
    """The channel the contact used; a sandbox message says so itself or is told by its addresses."""
    if message.channel != Channel.SANDBOX:
        return message.channel
    named = (message.raw or {}).get("channel")
    if named in Channel.values:
        return named
    return Channel.EMAIL if "@" in message.from_address else Channel.SMS


def organization_of_send(idem_key: str | None) -> Organization | None:
    """The organization that made the send a tracking event is about (None when the key is unknown)."""
    run = run_for_send(idem_key) if idem_key else None
    return run.organization if run else None


def note_failed_delivery(idem_key: str, *, status: str, detail: str) -> int:
    """Write a failed delivery onto the outbox row's `error`; returns rows changed.

    Only `sent` rows: the status itself is the worker's to move under its fence
    (there is no sent → failed transition), and a row still `sending` belongs to
    a worker that is about to write it. The DeliveryEvent keeps the full story.
    """
    text = f"delivery {status}" + (f" (error {detail})" if detail else "")
    return OutboxMessage.objects.filter(idem_key=idem_key, status=OutboxStatus.SENT).update(error=text)
