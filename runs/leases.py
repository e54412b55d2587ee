"""One writer per run: claim, renew, fence, release (DESIGN §5; the renewals while a holder works are
runs.lease_renewals').

Leases run on the database's clock so that workers with skewed clocks agree:
`statement_timestamp()`, not `now()`, which stays fixed for a whole
transaction and would be stale inside a caller's longer one. Every write of an episode goes through `fence`, which
locks the run row and checks the epoch first: a worker that lost its lease
(paused, partitioned, reaped) writes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction

from agents.models import Organization
from connectors import commits
from runs import json_rows, plan_cache, statements
from runs.models import Run


class LeaseLost(Exception):
    """The run's lease epoch moved: another worker owns it now."""


def claim(run_id: int, *, owner: str) -> int | None:
    """Take the run's lease if it is free or expired; returns the new epoch, or None if it is held."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_run
               SET lease_owner = %s, lease_epoch = lease_epoch + 1,
                   lease_expires_at = statement_timestamp() + make_interval(secs => %s)
             WHERE id = %s AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp())
         RETURNING lease_epoch
            """,
            [owner, settings.LUCIA_LEASE_SECONDS, run_id],
        )
        row = cursor.fetchone()
    return row[0] if row else None


# A lease is its epoch and its owner, both checked: an epoch alone can be handed out twice, when a database crash
# takes back the start that took it (runs.episode_loads.CLOCK_SQL). `owner` None (tests, tools outside a worker)
# accepts any holder: `lease_owner = lease_owner` is true for every held lease and NULL (false) for a free one.
HELD_BY = "lease_owner = coalesce({owner}, lease_owner)"


def renew(run_id: int, *, epoch: int, owner: str | None = None) -> bool:
    """Extend the lease; False means it was lost and the holder must stop. One statement, no transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE runs_run SET lease_expires_at = statement_timestamp() + make_interval(secs => %s)
             WHERE id = %s AND lease_epoch = %s AND {HELD_BY.format(owner="%s")}
            """,  # noqa: S608 (constants; every value is a parameter)
            [settings.LUCIA_LEASE_SECONDS, run_id, epoch, owner],
        )
        return cursor.rowcount == 1


def holds(run_id: int, *, epoch: int, seconds_left: float, owner: str | None = None) -> bool:
    """Whether the lease is still ours with at least `seconds_left` to run: a read, no write (and so no commit
    to wait for). False says nothing about who holds it: renew to find out."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT 1 FROM runs_run
             WHERE id = %s AND lease_epoch = %s AND {HELD_BY.format(owner="%s")}
               AND lease_expires_at > statement_timestamp() + make_interval(secs => %s)
            """,  # noqa: S608 (constants; every value is a parameter)
            [run_id, epoch, owner, seconds_left],
        )
        return cursor.fetchone() is not None


def release(run_id: int, *, epoch: int, owner: str | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET lease_owner = NULL, lease_expires_at = NULL"  # noqa: S608 (constants)
            f" WHERE id = %s AND lease_epoch = %s AND {HELD_BY.format(owner='%s')}",
            [run_id, epoch, owner],
        )


# Rows returned beside the run's own columns: its organization, and its contacts (the episode's hot path reads
# both with the lease, runs.episode_loads). `{run}` is the run row's name in the statement.
ORGANIZATION_COLUMN = "(SELECT row_to_json(o) FROM agents_organization o WHERE o.id = {run}.organization_id)"
CONTACTS_COLUMN = ("(SELECT coalesce(json_agg(c ORDER BY c.role, c.id), '[]') FROM runs_contact c"
                   " WHERE c.run_id = {run}.id)")


@dataclass(frozen=True)
class Rider:
    """Rows the fence's own statement writes: `sql` is one or more data-modifying CTEs (", name AS (INSERT ...)")
    that read the fenced row as `fenced` (and write nothing when it is empty: the epoch moved), with their named
    parameters; `returning` adds columns to the statement's result (", (SELECT id FROM name) AS name"), read as
    attributes of the run row it returns. `journal_entries` entries take the run's next journal seqs
    (fenced.journal_seq is the last of them) and their usage is added to the run's counters. Riders add up;
    names must be unique within a statement (`tag`).

    A rider that ends the episode may also write the fenced run row itself, in the fence's own UPDATE (PostgreSQL
    updates a row once per statement: a CTE's second UPDATE of it would be silently dropped): `run_sets` adds
    assignments (", status = ..."), `release_when` a condition under which the UPDATE releases the lease instead of
    extending it. In both, `runs_run` is the row as it stands once locked."""

    sql: str = ""
    params: dict = field(default_factory=dict)
    returning: str = ""
    run_sets: str = ""
    release_when: str = ""
    journal_entries: int = 0
    tokens: int = 0
    cost: Decimal = Decimal(0)
    steps: int = 0

    def __add__(self, other: Rider) -> Rider:
        return joined([self, other])


def joined(riders: list[Rider]) -> Rider:
    """The riders added up (`a + b + ...`) in one pass: a fence's statement takes its pending riders and its own."""
    if len(riders) == 1:
        return riders[0]
    sql = returning = run_sets = ""
    conditions = []
    params: dict = {}
    entries = tokens = steps = 0
    cost = Decimal(0)
    for rider in riders:
        sql += rider.sql
        returning += rider.returning
        run_sets += rider.run_sets
        if rider.release_when:
            conditions.append(f"({rider.release_when})")
        params.update(rider.params)
        entries += rider.journal_entries
        tokens += rider.tokens
        cost += rider.cost
        steps += rider.steps
    return Rider(sql=sql, params=params, returning=returning, run_sets=run_sets, release_when=" AND ".join(conditions),
                 journal_entries=entries, tokens=tokens, cost=cost, steps=steps)


_tags = itertools.count(1)
# A tag in a rider's names ("outbox_row_rider17", "%(outbox_row_rider17_id)s"): `write` renumbers them from 1 in
# order of appearance, so that a statement of the same shape has the same text every episode (runs.statements
# prepares it once).
_TAG = re.compile(r"rider(\d+)")


def tag() -> str:
    """A name part that makes a rider's CTE and parameter names unique in the statement it joins."""
    return f"rider{next(_tags)}"


def unflushed() -> Rider:
    """A rider that lets the fence's statement commit without waiting for its WAL to reach the disk
    (synchronous_commit off for its transaction), when the statement runs alone in its implicit transaction
    (connectors.commits.in_own_transaction); inside a caller's transaction it is nothing: the caller chose.

    For a write after which nothing leaves Lucia, only more rows of this database: after a database crash the
    commits that survive are a prefix of the WAL's order, so no later row survives without this one."""
    if not commits.in_own_transaction(connection):
        return Rider()
    name = f"unflushed_{tag()}"
    return Rider(sql=f""",
{name} AS (SELECT {commits.TURN_OFF} AS setting FROM fenced)""",  # noqa: S608 (constants)
                 returning=f", (SELECT setting FROM {name}) AS {name}")  # noqa: S608 (a name, no value)


# The run row's UPDATE that takes the lease (if free or expired) or, fenced, keeps it (if the epoch is still ours),
# as the head of a statement that goes on from the row it returns (runs.episode_loads: `WITH holder AS (...)`).
# The claim also clears the run's queue mark (runs.queue.mark_started): a task for the run has started.
# `__ALSO__` takes the statement's other assignments to the run row (", status = ..."): PostgreSQL updates a row
# once per statement, so a second UPDATE of it in a later CTE would be silently dropped.
CLAIM_SQL = """
    UPDATE runs_run
       SET lease_owner = %(owner)s, lease_epoch = lease_epoch + 1,
           lease_expires_at = statement_timestamp() + make_interval(secs => %(lease_seconds)s),
           advance_enqueued_at = NULL__ALSO__
     WHERE id = %(run)s AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp())
 RETURNING *"""
HOLD_SQL = """
    UPDATE runs_run
       SET lease_expires_at = statement_timestamp() + make_interval(secs => %(lease_seconds)s)__ALSO__
     WHERE id = %(run)s AND lease_epoch = %(epoch)s AND __HELD_BY__
 RETURNING *""".replace("__HELD_BY__", HELD_BY.format(owner="%(owner)s"))


def claim_params(run_id: int, *, owner: str) -> dict:
    return {"owner": owner, "lease_seconds": settings.LUCIA_LEASE_SECONDS, "run": run_id}


def hold_params(run_id: int, *, epoch: int, owner: str | None = None) -> dict:
    return {"epoch": epoch, "owner": owner, "lease_seconds": settings.LUCIA_LEASE_SECONDS, "run": run_id}


def holder_columns(run: str) -> str:
    """The columns a statement returns for the run row named `run` (read by `holder_row`): every one but the plan
    (its hash instead, runs.plan_cache.columns), its organization and its contacts."""
    return f"{plan_cache.columns(run)}, {_children(run)}"


def holder_row(row: dict) -> Run:
    """The run of a row read with `holder_columns`, its plan, organization and contacts' rows attached."""
    run = statements.instance(Run, row)
    run.contact_rows = row["contact_rows"]
    run.organization = json_rows.instance(Organization, row["organization_row"])
    return plan_cache.attach(run)


@contextlib.contextmanager
def fence(run_id: int, *, epoch: int, owner: str | None = None, rider: Rider | None = None,
          with_children: bool = False) -> Iterator[Run]:
    """A transaction in which the run row is locked and still ours; raises LeaseLost otherwise.

    Its first statement is an UPDATE conditioned on the epoch (`write`), which locks the row, extends the lease
    and writes `rider`'s rows. Keep the body short and free of network calls: the row lock is held until it
    ends. `with_children`: the organization and the contacts come along (`run.organization`, `run.contact_rows`).
    """
    with transaction.atomic():
        yield write(run_id, epoch=epoch, owner=owner, rider=rider, with_children=with_children)


# The run's fields that no episode changes once it has started (runs.starts writes them; a data migration may
# rewrite one between episodes, which each read a fresh row; the plan is runs.plan_cache's): a fence that holds
# the episode's own earlier row of the run takes them from there.
STARTED_FIELDS = ("organization", "version", "sim", "external_ref", "goal", "inputs", "step_budget", "token_budget",
                  "cost_budget", "created_at")


def write(run_id: int, *, epoch: int, owner: str | None = None, rider: Rider | None = None,
          with_children: bool = False, known: Run | None = None) -> Run:
    """A fenced write in one statement, atomic by itself (no transaction around it unless the caller's):
    an UPDATE conditioned on the epoch, which locks the row, extends the lease (the holder is alive: a send that
    follows keeps any successor out until it is done) and writes `rider`'s rows. Nothing is written when the
    epoch moved: raises LeaseLost. Returns the run row as the statement left it; with `known` (a row of the run
    read earlier, e.g. with the episode's start) its STARTED_FIELDS are copied from there, not read back."""
    if known is not None and known.pk != run_id:
        raise ValueError(f"a row of run {known.pk} stands for run {run_id}")
    rider, renamed = _renumbered(rider or Rider())
    params = {**rider.params, "lease_seconds": settings.LUCIA_LEASE_SECONDS, "run_id": run_id, "epoch": epoch,
              "entries": rider.journal_entries, "tokens": rider.tokens, "cost": rider.cost, "steps": rider.steps,
              "owner": owner}
    children = f", {_children('fenced')}" if with_children else ""
    columns = plan_cache.columns("fenced", leaving_out=STARTED_FIELDS if known is not None else ())
    extended = "statement_timestamp() + make_interval(secs => %(lease_seconds)s)"
    lease = f"lease_expires_at = {extended}"
    if rider.release_when:  # the condition once, for both columns
        # `x` is kept a sub-select of its own (OFFSET 0): pulled up into the assignment, its condition (sub-selects
        # of its own) was evaluated once per column.
        lease = ("(lease_owner, lease_expires_at) = (SELECT CASE WHEN x.release THEN NULL ELSE runs_run.lease_owner"  # noqa: S608
                 f" END, CASE WHEN x.release THEN NULL ELSE {extended} END"
                 f" FROM (SELECT {rider.release_when} AS release OFFSET 0) x)")
    rows = statements.fetch_instances(
        Run,
        f"""
        WITH fenced AS (
            UPDATE runs_run
               SET {lease},
                   journal_seq = journal_seq + %(entries)s, tokens_used = tokens_used + %(tokens)s,
                   cost_used = cost_used + %(cost)s, steps_used = steps_used + %(steps)s{rider.run_sets}
             WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND {HELD_BY.format(owner="%(owner)s")}
         RETURNING *
        ){rider.sql}
        SELECT {columns}{children}{rider.returning} FROM fenced
        """,  # noqa: S608 (constants; every value is a parameter)
        params,
    )
    if not rows:
        current = Run.objects.filter(pk=run_id).values_list("lease_epoch", "lease_owner").first()
        raise LeaseLost(f"run {run_id}: the lease is (epoch, owner) {current}, this worker holds {(epoch, owner)}")
    if known is not None:
        for name in _STARTED_ATTNAMES:
            setattr(rows[0], name, getattr(known, name))
    run = plan_cache.attach(rows[0])
    for canonical, name in renamed.items():  # the rider's own names for what it returned
        setattr(run, name, getattr(run, canonical))
    return _with_children(run) if with_children else run


_STARTED_ATTNAMES = tuple(Run._meta.get_field(name).attname for name in STARTED_FIELDS)


def _renumbered(rider: Rider) -> tuple[Rider, dict[str, str]]:
    """`rider` with its tags numbered from 1 in order of appearance, and the returned columns' new names mapped
    to the names the rider's authors know."""
    # Its texts and parameter names renamed in one text (none holds a NUL: PostgreSQL's texts cannot), with one
    # split: a pass in C, no Python call per tag (the fence's text has dozens).
    texts = (rider.sql, rider.run_sets, rider.release_when, rider.returning, *rider.params)
    parts = _TAG.split("\0".join(texts))
    found = parts[1::2]
    names = {number: f"rider{new}" for new, number in enumerate(dict.fromkeys(found), start=1)}
    if all(name == f"rider{number}" for number, name in names.items()):
        return rider, {}
    parts[1::2] = [names[number] for number in found]
    sql, run_sets, release_when, returning, *params = "".join(parts).split("\0")
    renamed = {new: name for new, name in zip(_RETURNED.findall(returning), _RETURNED.findall(rider.returning),
                                              strict=True) if new != name}
    return Rider(sql=sql, params=dict(zip(params, rider.params.values(), strict=True)), returning=returning,
                 run_sets=run_sets, release_when=release_when, journal_entries=rider.journal_entries,
                 tokens=rider.tokens, cost=rider.cost, steps=rider.steps), renamed


# A column a rider returns: ", (SELECT id FROM name) AS name".
_RETURNED = re.compile(r" AS (\w+)")


def _children(run: str) -> str:
    return (f"{ORGANIZATION_COLUMN.format(run=run)} AS organization_row,"
            f" {CONTACTS_COLUMN.format(run=run)} AS contact_rows")


def _with_children(run: Run) -> Run:
    run.organization = json_rows.instance(Organization, run.organization_row)
    return run
