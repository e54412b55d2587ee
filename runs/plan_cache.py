"""Compiled plans by content hash, parsed once per process, and what the runtime derives from them.

A run's plan is copied from its version when it starts and never changes (nothing writes it after the start; the
admin shows it read-only), yet every claim and fence returns the run row: they return the plan's hash instead
(`columns`: the run's `plan_hash`, which the database computes once, when the row is written), and the plan comes
from here, read from the run row only the first time this process meets it. The hash is jsonb's own 64-bit one
(`jsonb_hash_extended`: hashing a plan of tens of kilobytes at every claim cost the database more than the rest
of the claim's result), keyed with the run's version (a plan is its version's compiled config, as it was when the
run started). The dicts handed out are shared: read them, never change them.

Because a cached plan never changes, what an episode derives from it alone (the model's tool list, compiled
checks, the guardrail's trusted text) is computed once per plan too (`derived`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

from runs.models import Run

T = TypeVar("T")

# (version id, plan hash) -> plan.
_plans: dict[tuple[int, int], dict] = {}
# id(plan) -> (plan, {name: value}) for the plans in _plans: the plan is held, so its id is not reused.
_derived: dict[int, tuple[dict, dict]] = {}
LIMIT = 512


@functools.cache
def columns(run: str, *, leaving_out: tuple[str, ...] = ()) -> str:
    """`run`'s columns for a RETURNING or SELECT list: every one but the plan (its hash, `plan_hash`, is one) and
    the fields named in `leaving_out`."""
    return ", ".join(f"{run}.{field.column}" for field in Run._meta.concrete_fields
                     if field.name != "plan" and field.name not in leaving_out)


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
    """Set `run.plan` (a row read with `columns`) from the cache by its version and `plan_hash`, reading the plan
    once on a miss."""
    plan = _plans.get((run.version_id, run.plan_hash))
    if plan is None:
        # The plan with its own hash, as they stand now: a plan rewritten since the row was read (a data migration)
        # is cached under its new hash, never under the old one.
        with connection.cursor() as cursor:
            cursor.execute("SELECT plan_hash, plan::text FROM runs_run WHERE id = %s", [run.pk])
            run.plan_hash, text = cursor.fetchone()
        plan = _plans.get((run.version_id, run.plan_hash))
        if plan is None:
            if len(_plans) >= LIMIT:
                _clear()
            plan = _plans[(run.version_id, run.plan_hash)] = json.loads(text)
            _derived[id(plan)] = (plan, {})
    run.plan = plan
    return run


def _clear() -> None:
    _plans.clear()
    _derived.clear()
