"""The start of an episode in one statement: take (or, fenced, keep) the run's lease, pick the next due episode,
mark it running, and read everything the episode needs (the run row, its organization and contacts, its tasks,
outbox rows, journal history, the organization's identities, suppressions and the sends its caps count) — the
"claim + load" transaction of DESIGN §10 in one round trip, committed by itself.

`claim_and_start` is a worker's first episode (runs.leases.CLAIM_SQL heads the statement), `hold_and_start` the
next ones under the same lease (runs.leases.HOLD_SQL). Whatever the statement reads about the run is read from the
row its head returns (`holder`), so the epoch, the run's clock and whether it is open are the lease's own. The
contacts' addresses (suppressions, caps) are normalized in SQL as connectors.addresses.normalize does it for the
columns as stored (an addr-spec lower-cased, a number as + and its digits, a Slack id trimmed; runs.starts and
runs.contact_memory validate them; tests/runs/test_episode_loads.py holds the two to the same result).
`facts_for` reads the same facts for an episode context built some other way (tests, tools called outside the
worker), on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection

from connectors import commits
from connectors.models import Channel
from runs import clock, json_rows, leases, statements
from runs.episode_facts import EpisodeFacts
from runs.models import Contact, Episode, OutboxMessage, Run, Task

# The longest per-contact cap window (runs.compliance.CAP_WINDOWS): how far back the caps' sends are read.
CAPS_LOOKBACK = timedelta(days=7)
HISTORY_ENTRIES = 20
# Every channel: the suppressions are read on every channel, the condition lets the lookup probe
# suppression_unique_address (organization, channel, address) for each pair instead of reading every suppression
# of the organization.
CHANNELS = list(Channel.values)
# The seq that stands for "after every episode" when facts are read outside one (the column is an integer).
UNBOUNDED_SEQ = 2**31 - 1

# The run's clock and the contacts' addresses, from the run row the statement holds. A claim's start (the lease
# taken with a new epoch) in its own (implicit) transaction commits without waiting for its WAL to reach the disk
# (`unflushed`: synchronous_commit off until that transaction ends). After a database crash the commits that survive
# are a prefix of the WAL's order, so a claim that is lost is as if it had never been made: the lease and the
# episode are as they were before it, and the next claim takes them. (A hold's start keeps the epoch and the owner,
# so a lost one would fence nobody out: it waits for the disk, and so makes everything before it durable.) Nothing
# leaves Lucia on the strength of an unflushed start: an episode's first send to a provider is preceded by a commit
# of its own that waits (runs.outbox.open_row), which flushes every commit before it (a sandbox send leaves nothing:
# its row commits after the start in the WAL's order); what such a crash costs is the model call
# made meanwhile, as a worker's crash does. The crash cuts the connection of the worker that made the lost start;
# one that carries on anyway (behind a pooler that kept its client connection) writes, renews, holds and releases
# nothing: every lease statement checks the owner as well as the epoch (runs.leases.HELD_BY), and the epoch a later
# claim hands out again is that claim's owner's (worker.default_owner names each claim apart). What is given up: an
# episode that crashes the server itself before its start reaches the disk (its first write that waits, or the WAL
# writer, within three times wal_writer_delay) does not count that attempt (LUCIA_EPISODE_MAX_ATTEMPTS counts what
# stops workers; their starts are on disk by the time a reaper looks).
CLOCK_SQL = """
clock AS (
    SELECT CASE WHEN h.sim AND h.virtual_now IS NOT NULL THEN h.virtual_now ELSE %(wall)s END AS now,
           h.status IN ('active', 'waiting', 'waiting_human') AS open,
           __UNFLUSHED__ AS unflushed
      FROM holder h
),
known AS (
    SELECT coalesce(array_agg(DISTINCT a.address), '{}') AS addresses
      FROM runs_contact c
     CROSS JOIN LATERAL (VALUES (CASE WHEN c.email LIKE '%%@%%' THEN lower(btrim(c.email)) END),
                                (nullif('+' || regexp_replace(c.phone, '[^0-9]', '', 'g'), '+')),
                                (btrim(c.slack_user))) a(address)
     WHERE c.run_id = (SELECT id FROM holder) AND a.address <> ''
)""".replace("__UNFLUSHED__", commits.UNFLUSHED_CALL)

# The next episode to run: one left running under an older epoch first (resume), then the first due by seq.
# The run's episodes are found by run, the test `IS TRUE` (runs.models.episode's indexes say why): as a bare OR it
# could be planned as a BitmapOr of episode_running and episode_due.
PICK_SQL = """
candidate AS (
    SELECT e.id, e.seq FROM runs_episode e, holder h, clock
     WHERE e.run_id = h.id
       AND ((e.status = 'running' AND e.lease_epoch < h.lease_epoch)
            OR (e.status = 'queued' AND e.due_at <= clock.now)) IS TRUE
     ORDER BY e.status DESC, e.seq
     LIMIT 1
),
started AS (
    UPDATE runs_episode e
       SET status = 'running', attempts = e.attempts + 1, lease_epoch = h.lease_epoch, started_at = clock.now
      FROM holder h, clock
     WHERE e.id = (SELECT id FROM candidate) AND clock.open
       AND ((e.status = 'running' AND e.lease_epoch < h.lease_epoch AND e.attempts < %(max_attempts)s)
            OR (e.status = 'queued' AND e.due_at <= clock.now))
 RETURNING e.*
)"""
# The pick's condition is checked again on the episode row as it stands when the UPDATE reaches it: the candidate
# was read as the database was when the statement began, and a writer that held the run row meanwhile (a reply
# cancelling this follow-up) may have settled it since. The row is found by its id as a value (a sub-select), so
# the plan is a primary-key lookup whatever the statistics say (a join with the CTE was planned as a scan of
# runs_episode while the table had none, and the prepared plan kept it).

# A waiting run wakes (waiting → active) in the lease's own UPDATE (leases.CLAIM_SQL's `__ALSO__`) when an episode
# will start: one it may resume, or one due by its clock (found by run, as the pick finds it). `runs_run` is the row
# before the statement. `w` stays a sub-select of its own (OFFSET 0): pulled up into the assignment, its EXISTS ran
# once per column.
WAKE_SQL = """,
           (status, wake_when, updated_at) = (
               SELECT CASE WHEN w.wakes THEN 'active' ELSE runs_run.status END,
                      CASE WHEN w.wakes THEN NULL ELSE runs_run.wake_when END,
                      CASE WHEN w.wakes THEN %(wall)s ELSE runs_run.updated_at END
                 FROM (SELECT runs_run.status = 'waiting' AND EXISTS (
                           SELECT 1 FROM runs_episode e
                            WHERE e.run_id = runs_run.id
                              AND ((e.status = 'running' AND e.lease_epoch < __EPOCH__
                                    AND e.attempts < %(max_attempts)s)
                                   OR (e.status = 'queued' AND e.due_at <= CASE
                                           WHEN runs_run.sim AND runs_run.virtual_now IS NOT NULL
                                           THEN runs_run.virtual_now ELSE %(wall)s END)) IS TRUE) AS wakes
                       OFFSET 0) w)"""

# The facts come back as one JSON object (`facts`; one column to decode instead of one per fact), but for the first
# journal entry's time, read as a timestamp like every other column. The history is the run's journal read
# backwards by (run_id, seq) (journal_unique_seq) until HISTORY_ENTRIES are found, each entry's episode looked up by
# its key: as a join with runs_episode the prepared (generic) plan merged it with a scan of every episode of every
# run, a cost that grew with the table.
FACTS_SQL = """
    (SELECT j.at FROM runs_journalentry j WHERE j.episode_id = (SELECT id FROM candidate)
      ORDER BY j.seq LIMIT 1) AS first_entry_at,
    json_build_object(
      'tasks', (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM runs_task t WHERE t.run_id = h.id),
      'outbox', (SELECT coalesce(json_agg(json_build_object(
                             'row', o, 'episode_seq', (SELECT e.seq FROM runs_episode e WHERE e.id = o.episode_id))
                         ORDER BY o.created_at, o.id), '[]') FROM runs_outboxmessage o
                  WHERE o.run_id = h.id
                    AND (o.episode_id = (SELECT id FROM candidate) OR o.status IN ('pending', 'sending'))),
      'human_answers', (
          SELECT coalesce(json_agg(json_build_object('seq', e.seq, 'payload', e.payload) ORDER BY e.seq), '[]')
            FROM runs_episode e WHERE e.run_id = h.id AND e.kind = 'human_answer'),
      'messages', (
          SELECT coalesce(json_agg(json_build_object('id', e.id, 'seq', e.seq, 'kind', e.kind, 'status', e.status,
                                                     'payload', e.payload) ORDER BY e.seq), '[]')
            FROM runs_episode e WHERE e.run_id = h.id AND e.kind IN ('inbound', 'call_report')),
      'inbound_headers', (
          SELECT coalesce(json_object_agg(m.id, m.headers), '{}') FROM connectors_inboundmessage m
           WHERE m.id IN (SELECT (e.payload ->> 'inbound_message_id')::bigint FROM runs_episode e
                           WHERE e.run_id = h.id AND e.kind = 'inbound'
                             AND jsonb_typeof(e.payload -> 'inbound_message_id') = 'number')),
      'history', (SELECT coalesce(json_agg(x ORDER BY x.seq), '[]') FROM (
          SELECT j.seq, j.kind, j.data, j.at FROM runs_journalentry j
           WHERE j.run_id = h.id AND j.kind <> 'model_call'
             AND (SELECT e.seq FROM runs_episode e WHERE e.id = j.episode_id) < (SELECT seq FROM candidate)
           ORDER BY j.seq DESC LIMIT %(history)s) x),
      'identities', (SELECT coalesce(json_agg(i ORDER BY i.sandbox, i.id), '[]') FROM connectors_identity i
                      WHERE i.organization_id = h.organization_id),
      'suppressions', (
          SELECT coalesce(json_agg(json_build_array(s.channel, s.address)), '[]') FROM connectors_suppression s
           WHERE s.organization_id = h.organization_id AND s.channel IN (__CHANNELS__)
             AND s.address = ANY((SELECT addresses FROM known)::text[])),
      'handed_off', EXISTS (SELECT 1 FROM runs_escalation x
                             WHERE x.run_id = h.id AND x.kind = 'handoff' AND x.status = 'open'),
      'sends', CASE WHEN h.sim THEN __SIM_SENDS__ ELSE __REAL_SENDS__ END) AS facts"""

# Sends that count against per-contact caps (read whether or not the plan has caps: the row is read before the
# plan is known; `_facts` drops them without caps): a simulation counts only its own, a real run every real run
# of its organization. Found by recipient (outbox_recipient_time), the run's organization checked per row found:
# as a join with runs_run the planner could (and, without statistics, did) read every run of the organization
# and its outbox instead, a cost that grows with the organization.
CAPS_SQL = """(SELECT coalesce(json_agg(json_build_array(o.recipient, o.created_at, o.sent_at)), '[]')
       FROM runs_outboxmessage o
      WHERE o.recipient = ANY((SELECT addresses FROM known)::text[])
        AND o.status IN ('sending', 'sent', 'uncertain')
        AND (o.created_at > clock.now - %(caps_lookback)s OR o.sent_at > clock.now - %(caps_lookback)s)
        AND __SCOPE__)"""
SIM_SENDS_SQL = CAPS_SQL.replace("__SCOPE__", "o.run_id = h.id")
REAL_SENDS_SQL = CAPS_SQL.replace(
    "__SCOPE__", "(SELECT r.organization_id = h.organization_id AND NOT r.sim FROM runs_run r WHERE r.id = o.run_id)")
FACTS_SQL = (FACTS_SQL.replace("__SIM_SENDS__", SIM_SENDS_SQL).replace("__REAL_SENDS__", REAL_SENDS_SQL)
             .replace("__CHANNELS__", statements.literals(CHANNELS)))


def _start_sql(head: str) -> str:
    """The start statement headed by `head` (the lease's UPDATE ... RETURNING *); every value is a parameter."""
    return "\n".join([
        f"WITH holder AS ({head}),{CLOCK_SQL},{PICK_SQL}",
        f"SELECT {leases.holder_columns('h')}, (SELECT id FROM candidate) AS candidate_id,",  # noqa: S608 (constants)
        f"       (SELECT row_to_json(s) FROM started s) AS episode,{FACTS_SQL}",  # noqa: S608 (constants)
        "  FROM holder h, clock",
    ])


# The claim's epoch is the row's next one; a hold keeps the worker's.
CLAIM_START_SQL = _start_sql(leases.CLAIM_SQL.replace("__ALSO__",
                                                      WAKE_SQL.replace("__EPOCH__", "runs_run.lease_epoch + 1")))
HOLD_START_SQL = _start_sql(leases.HOLD_SQL.replace("__ALSO__", WAKE_SQL.replace("__EPOCH__", "%(epoch)s")))
# The facts of an episode already running, read outside any start: the run row as it stands, and the episode.
FACTS_FOR_SQL = "\n".join([
    f"WITH holder AS (SELECT * FROM runs_run WHERE id = %(run)s),{CLOCK_SQL},",  # noqa: S608 (constants)
    "candidate AS (SELECT %(episode)s::bigint AS id, %(seq)s::integer AS seq)",
    f"SELECT{FACTS_SQL}",
    "  FROM holder h, clock",
])


@dataclass
class Started:
    """An episode marked running, with what it reads. `episode` is None when the picked episode could not
    start (`blocked`: the run has ended, or it failed too often)."""

    run: Run
    episode: Episode | None
    blocked: Episode | None
    contacts: list[Contact]
    tasks: list[Task]
    facts: EpisodeFacts | None


@dataclass
class Start:
    """What a start statement found: the run row (None: the lease is held elsewhere, or this epoch lost it), and
    the episode started (None: nothing is due)."""

    run: Run | None
    started: Started | None


def claim_and_start(run_id: int, *, owner: str) -> Start:
    """Take the run's lease and start its next due episode, in one statement (two when nothing looked due).

    A claim that waited for another writer's lock on the run row (an event recording its episode and enqueueing
    this very task) takes the lease once that writer commits, but the rest of its statement reads the database as
    it was when the statement began: the writer's episode is not there. So "nothing due" is asked again, under the
    lease just taken, by a statement that sees it.
    """
    start = _start(CLAIM_START_SQL, leases.claim_params(run_id, owner=owner),
                   unflushed=commits.in_own_transaction(connection))
    if start.run is not None and start.started is None:
        return hold_and_start(run_id, epoch=start.run.lease_epoch, owner=owner)
    return start


def hold_and_start(run_id: int, *, epoch: int, owner: str | None) -> Start:
    """Start the run's next due episode under the lease the worker holds (`epoch`, `owner`), in one statement.
    Its commit waits for the disk: it keeps the epoch and the owner, so a lost one would fence nobody out."""
    return _start(HOLD_START_SQL, leases.hold_params(run_id, epoch=epoch, owner=owner), unflushed=False)


def facts_for(run: Run, episode: Episode | None, *, plan: dict) -> EpisodeFacts:
    """The facts of an episode already running under `plan`, read now (one statement; the contacts' addresses as
    stored). Without an episode (a context outside any, e.g. reviewing an edited draft, runs.approvals) the whole
    run's history counts."""
    params = {**_params(unflushed=False), "run": run.pk, "episode": episode.pk if episode else None,
              "seq": episode.seq if episode else UNBOUNDED_SEQ}
    return _facts(statements.fetch_dicts(FACTS_FOR_SQL, params)[0], plan=plan, episode=episode)


def _start(sql: str, params: dict, *, unflushed: bool) -> Start:
    params.update(_params(unflushed=unflushed), max_attempts=settings.LUCIA_EPISODE_MAX_ATTEMPTS)
    rows = statements.fetch_dicts(sql, params)
    if not rows:
        return Start(run=None, started=None)
    row = rows[0]
    run = leases.holder_row(row)
    contacts = json_rows.instances(Contact, run.contact_rows)
    if row["candidate_id"] is None:
        return Start(run=run, started=None)
    if row["episode"] is None:
        blocked = Episode.objects.get(pk=row["candidate_id"])
        return Start(run=run, started=Started(run=run, episode=None, blocked=blocked, contacts=contacts, tasks=[],
                                              facts=None))
    episode = json_rows.instance(Episode, row["episode"])
    return Start(run=run, started=Started(run=run, episode=episode, blocked=None, contacts=contacts,
                                          tasks=json_rows.instances(Task, row["facts"]["tasks"]),
                                          facts=_facts(row, plan=run.plan, episode=episode)))


def _params(*, unflushed: bool) -> dict:
    return {"wall": clock.wall_now(), "history": HISTORY_ENTRIES, "caps_lookback": CAPS_LOOKBACK,
            "unflushed": unflushed}


def _has_caps(plan: dict) -> bool:
    caps = (plan.get("compliance") or {}).get("per_contact_caps") or {}
    return any(caps.get(name) for name in ("per_day", "per_week"))


def _facts(row: dict, *, plan: dict, episode: Episode | None) -> EpisodeFacts:
    facts = row["facts"]
    rows = json_rows.instances(OutboxMessage, [read["row"] for read in facts["outbox"]])
    sends = None
    if _has_caps(plan):
        sends = {}
        for recipient, created_at, sent_at in facts["sends"]:
            sends.setdefault(recipient, []).append((json_rows.datetime_of(created_at), json_rows.datetime_of(sent_at)))
    return EpisodeFacts(
        outbox_by_key={message.idem_key: message for message in rows if episode and message.episode_id == episode.pk},
        unsettled=[message for message in rows if message.status in ("pending", "sending")],
        first_entry_at=row["first_entry_at"],
        human_answers=[(answer["seq"], answer["payload"] or {}) for answer in facts["human_answers"]],
        messages=facts["messages"],
        inbound_headers={int(key): value or {} for key, value in facts["inbound_headers"].items()},
        history=[{**entry, "at": json_rows.datetime_of(entry["at"])} for entry in facts["history"]],
        identity_rows=facts["identities"],
        suppressed={(channel, address) for channel, address in facts["suppressions"]},
        handed_off=facts["handed_off"],
        sends_by_recipient=sends,
        episode_seqs={read["row"]["episode_id"]: read["episode_seq"] for read in facts["outbox"]
                      if read["episode_seq"] is not None},
    )
