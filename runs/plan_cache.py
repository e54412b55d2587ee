"""Compiled plans by content hash, parsed once per process, and what the runtime derives from them.

A run's plan is copied from its version when it starts and never changes, yet every claim and fence returns the
run row: they return the plan's md5 instead (`COLUMNS`), and the plan comes from here, read from the run row
only the first time this process meets it. The dicts handed out are shared: read them, never change them.

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

# The run row's columns as claims and fences return them: every one but the plan, and the plan's hash.
PLAN_HASH = "md5({run}.plan::text)"
_plans: dict[str, dict] = {}
# id(plan) -> (plan, {name: value}) for the plans in _plans: the plan is held, so its id is not reused.
_derived: dict[int, tuple[dict, dict]] = {}
LIMIT = 512


@functools.cache
def columns(run: str) -> str:
    """`run`'s columns for a RETURNING or SELECT list, the plan replaced by its hash (`plan_md5`)."""
    names = [f"{run}.{field.column}" for field in Run._meta.concrete_fields if field.name != "plan"]
    return ", ".join(names) + f", {PLAN_HASH.format(run=run)} AS plan_md5"


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
    """Set `run.plan` from the cache by the row's `plan_md5`, reading it once on a miss."""
    plan = _plans.get(run.plan_md5)
    if plan is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT plan::text FROM runs_run WHERE id = %s", [run.pk])
            plan = json.loads(cursor.fetchone()[0])
        if len(_plans) >= LIMIT:
            _plans.clear()
            _derived.clear()
        _plans[run.plan_md5] = plan
        _derived[id(plan)] = (plan, {})
    run.plan = plan
    return run
