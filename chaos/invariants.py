"""The invariants a chaos run must end with, read in SQL from its database and from the fake provider.

Each check returns a Check: its name, whether it held, and a short detail
(counts, and the first offending ids when it did not). They hold under any
interleaving of faults; none depends on exact counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from chaos.provider import ChaosTwilio


@dataclass
class Check:
    name: str
    held: bool
    detail: str


def _rows(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def _sample(rows: list, limit: int = 5) -> str:
    shown = ", ".join(str(row[0] if len(row) == 1 else row) for row in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def check_all(twilio: ChaosTwilio, *, settle_s: float, settled: bool) -> list[Check]:
    return [
        no_key_sent_twice(twilio),
        no_text_sent_twice(twilio),
        provider_matches_outbox(twilio),
        sandbox_matches_outbox(),
        outbox_settled(),
        no_episode_running(),
        nothing_due_unexecuted(settle_s=settle_s, settled=settled),
        runs_at_rest(),
    ]


def no_key_sent_twice(twilio: ChaosTwilio) -> Check:
    """At the fake (the truth for SMS) and in the sandbox store: each idempotency key went out at most once."""
    twice = twilio.duplicate_keys()
    keyless = sum(1 for message in twilio.sent() if not message["idem_key"])
    sandbox = _rows("SELECT idem_key FROM connectors_sandboxmessage GROUP BY idem_key HAVING count(*) > 1")
    held = not twice and not keyless and not sandbox
    detail = (f"{len(twilio.messages)} SMS at the fake, {_count('connectors_sandboxmessage')} sandbox emails"
              if held else f"twice at the fake: {twice[:5]}; without a key: {keyless}; sandbox: {_sample(sandbox)}")
    return Check("no idempotency key sent twice", held, detail)


def no_text_sent_twice(twilio: ChaosTwilio) -> Check:
    """No (run, recipient, body) twice: in the outbox's sent rows, at the fake, and in the sandbox store."""
    outbox = _rows("SELECT run_id, recipient, count(*) FROM runs_outboxmessage WHERE status = 'sent'"
                   " GROUP BY run_id, recipient, payload->>'body' HAVING count(*) > 1")
    fake = twilio.duplicate_texts()
    sandbox = _rows("SELECT recipient, count(*) FROM connectors_sandboxmessage"
                    " GROUP BY recipient, payload->>'body' HAVING count(*) > 1")
    held = not outbox and not fake and not sandbox
    detail = "none" if held else f"outbox {_sample(outbox)}; fake {fake[:5]}; sandbox {_sample(sandbox)}"
    return Check("no (run, recipient, body) sent twice", held, detail)


def provider_matches_outbox(twilio: ChaosTwilio) -> Check:
    """Every SMS the fake accepted belongs to an outbox row, and every `sent` SMS row is at the fake."""
    rows = dict(_rows("SELECT idem_key, provider_message_id FROM runs_outboxmessage WHERE channel = 'sms'"))
    statuses = dict(_rows("SELECT idem_key, status FROM runs_outboxmessage WHERE channel = 'sms'"))
    accepted = {message["idem_key"]: message["sid"] for message in twilio.sent()}
    orphans = sorted(key for key in accepted if key not in rows)
    missing = sorted(key for key, status in statuses.items() if status == "sent" and accepted.get(key) != rows[key])
    held = not orphans and not missing
    detail = (f"{len(accepted)} accepted, all recorded" if held
              else f"at the fake with no row: {orphans[:5]}; sent rows the fake lacks: {missing[:5]}")
    return Check("every SMS at the fake has its outbox row", held, detail)


def sandbox_matches_outbox() -> Check:
    """Every email the sandbox stored belongs to an outbox row that went out (`sending` at least), and every `sent`
    email row is in the sandbox store. The write before a sandbox send does not wait for the disk (runs.leases
    .unflushed): after a database restart no stored email may outlive its row."""
    stored = dict(_rows("SELECT idem_key, provider_message_id FROM connectors_sandboxmessage"))
    rows = _rows("SELECT idem_key, status, provider_message_id FROM runs_outboxmessage WHERE channel = 'email'")
    went_out = {key for key, status, _ in rows if status not in ("pending", "awaiting_approval")}
    orphans = sorted(key for key in stored if key not in went_out)
    missing = sorted(key for key, status, provider in rows if status == "sent" and stored.get(key) != provider)
    held = not orphans and not missing
    detail = (f"{len(stored)} stored, all recorded" if held
              else f"stored with no row that went out: {orphans[:5]}; sent rows the store lacks: {missing[:5]}")
    return Check("every sandbox email has its outbox row", held, detail)


def outbox_settled() -> Check:
    """Every outbox row is `sent`, or `uncertain` with exactly one open uncertain_send escalation."""
    counts = dict(_rows("SELECT status, count(*) FROM runs_outboxmessage GROUP BY status"))
    unsettled = _rows("SELECT id, status FROM runs_outboxmessage WHERE status NOT IN ('sent', 'uncertain')"
                      " ORDER BY id")
    unescalated = _rows(
        "SELECT o.id, count(e.id) FROM runs_outboxmessage o LEFT JOIN runs_escalation e"
        " ON e.outbox_message_id = o.id AND e.kind = 'uncertain_send' AND e.status = 'open'"
        " WHERE o.status = 'uncertain' GROUP BY o.id HAVING count(e.id) <> 1 ORDER BY o.id")
    held = not unsettled and not unescalated
    detail = (", ".join(f"{count} {status}" for status, count in sorted(counts.items())) if held
              else f"not settled: {_sample(unsettled)}; uncertain without one open escalation: "
                   f"{_sample(unescalated)}")
    return Check("every outbox row sent, or uncertain with one open escalation", held, detail)


def no_episode_running() -> Check:
    running = _rows("SELECT e.id FROM runs_episode e JOIN runs_run r ON r.id = e.run_id"
                    " WHERE NOT r.sim AND e.status = 'running' ORDER BY e.id")
    return Check("no episode left running", not running, "none" if not running else _sample(running))


def nothing_due_unexecuted(*, settle_s: float, settled: bool) -> Check:
    """No queued episode is due; when the settle phase ran out of time with some due, the cluster is wedged."""
    due = _rows("SELECT e.id FROM runs_episode e JOIN runs_run r ON r.id = e.run_id"
                " WHERE NOT r.sim AND e.status = 'queued' AND e.due_at <= statement_timestamp() ORDER BY e.id")
    if not due:
        return Check("no episode due and unexecuted", True, "none")
    wedged = "" if settled else f"wedged: {len(due)} due episodes unexecuted, none finished for {settle_s:.0f} s; "
    return Check("no episode due and unexecuted", False, wedged + _sample(due))


def runs_at_rest() -> Check:
    """Every run is finished, or waits for a human on an open escalation named in its wake_when."""
    counts = dict(_rows("SELECT status, count(*) FROM runs_run WHERE NOT sim GROUP BY status"))
    restless = _rows(
        "SELECT r.id, r.status, r.wake_when FROM runs_run r WHERE NOT r.sim AND ("
        " r.status IN ('active', 'waiting')"
        " OR (r.status = 'waiting_human' AND NOT EXISTS (SELECT 1 FROM runs_escalation e WHERE e.run_id = r.id"
        "     AND e.status = 'open' AND r.wake_when = 'human:' || e.id))"
        " OR EXISTS (SELECT 1 FROM runs_episode e WHERE e.run_id = r.id AND e.status IN ('queued', 'running')))"
        " ORDER BY r.id")
    detail = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return Check("every run at rest", not restless, detail if not restless else f"{detail}; {_sample(restless)}")


def _count(table: str) -> int:
    return _rows(f"SELECT count(*) FROM {table}")[0][0]  # noqa: S608 - a constant table name
