"""Compiled plans by content hash, parsed once per process, and what the runtime derives from them.

A run's plan is copied from its version when it starts and never changes (nothing writes it after the start; the
admin shows it read-only), yet every claim and fence returns the run row: they return a hash of the plan instead
(`columns`), and the plan comes from here, read from the run row only the first time this process meets it. Once
this process holds a run's plan, its statements skip even the hash (`known`): hashing a plan of tens of kilobytes
cost more than the rest of a fence's result. The hash is jsonb's own 64-bit one (`jsonb_hash_extended`, on the
stored value: an md5 of the plan printed as text cost three times as much), keyed with the run's version (a plan
is its version's compiled config, as it was when the run started). The dicts handed out are shared: read them,
never change them.

Because a cached plan never changes, what an episode derives from it alone (the model's tool list, compiled
checks, the guardrail's trusted text) is computed once per plan too (`derived`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from django.db import connection

from runs.models import Run

T = TypeVar("T")

# The run row's columns as claims and fences return them: every one but the plan, and the plan's hash unless the
# statement's `plan_known` parameter (`known`) says this process holds the run's plan already.
PLAN_HASH = "CASE WHEN %(plan_known)s THEN NULL ELSE jsonb_hash_extended({run}.plan, 0) END"
# (version id, plan hash) -> plan.
_plans: dict[tuple[int, int], dict] = {}
# id(plan) -> (plan, {name: value}) for the plans in _plans: the plan is held, so its id is not reused.
_derived: dict[int, tuple[dict, dict]] = {}
# run id -> (its created_at, its version id, its plan: one of _plans'), for the runs this process met. The first two
# tell the same run from another that came to have its id (a database restored or re-created under a running
# process): the plan is only taken by run id for a row that matches both.
_by_run: dict[int, tuple[datetime, int, dict]] = {}
LIMIT = 512
RUNS_LIMIT = 20_000


@functools.cache
def columns(run: str, *, leaving_out: tuple[str, ...] = ()) -> str:
    """`run`'s columns for a RETURNING or SELECT list, the plan replaced by its hash (`plan_hash`; NULL when the
    statement's `%(plan_known)s` is true), without the fields named in `leaving_out`. Pass
    `plan_known=known(run_id)` with them."""
    names = [f"{run}.{field.column}" for field in Run._meta.concrete_fields
             if field.name != "plan" and field.name not in leaving_out]
    return ", ".join(names) + f", {PLAN_HASH.format(run=run)} AS plan_hash"


def known(run_id: int) -> bool:
    """Whether this process holds the run's plan: a statement reading `columns` need not hash it."""
    return run_id in _by_run


def derived(plan: dict, name: str, build: Callable[[dict], T]) -> T:
    """`build(plan)`, computed once per cached plan and `name`; for any other plan dict (one a test or the ORM
    made, which its owner may still change) computed on every call. `build` reads the plan only, and what it
    returns is shared like the plan: never change it."""
    entry = _derived.get(id(plan))
    if entry is None or entry[0] is not plan:
        return build(plan)
    values = entry[1]
    if name not in values:
        values[name] = build(plan)
    return values[name]


def attach(run: Run) -> Run:
    """Set `run.plan` from the cache, by the run (its row's `plan_hash` is NULL: the statement was told the plan is
    known; the row's created_at and version must be the cached run's) or by the row's `plan_hash`, reading it once
    on a miss."""
    if run.plan_hash is None:
        created_at, version_id, plan = _by_run.get(run.pk, (None, None, None))
        if (created_at, version_id) != (run.created_at, run.version_id):
            plan = None
    else:
        plan = _plans.get((run.version_id, run.plan_hash))
    if plan is None:
        # Also when the run's entry went (the caches were cleared since the statement's parameters were made).
        with connection.cursor() as cursor:
            cursor.execute("SELECT jsonb_hash_extended(plan, 0), plan::text FROM runs_run WHERE id = %s", [run.pk])
            digest, text = cursor.fetchone()
        plan = _plans.get((run.version_id, digest))
        if plan is None:
            if len(_plans) >= LIMIT:
                _clear()
            plan = _plans[(run.version_id, digest)] = json.loads(text)
            _derived[id(plan)] = (plan, {})
    if len(_by_run) >= RUNS_LIMIT:
        _by_run.clear()
    _by_run[run.pk] = (run.created_at, run.version_id, plan)
    run.plan = plan
    return run


def _clear() -> None:
    _plans.clear()
    _derived.clear()
    _by_run.clear()
