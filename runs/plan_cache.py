"""Compiled plans by content hash, parsed once per process.

A run's plan is copied from its version when it starts and never changes, yet every claim and fence returns the
run row: they return the plan's md5 instead (`COLUMNS`), and the plan comes from here, read from the run row
only the first time this process meets it. The dicts handed out are shared: read them, never change them.
"""

from __future__ import annotations

import json

from django.db import connection

from runs.models import Run

# The run row's columns as claims and fences return them: every one but the plan, and the plan's hash.
PLAN_HASH = "md5({run}.plan::text)"
_plans: dict[str, dict] = {}
LIMIT = 512


def columns(run: str) -> str:
    """`run`'s columns for a RETURNING or SELECT list, the plan replaced by its hash (`plan_md5`)."""
    names = [f"{run}.{field.column}" for field in Run._meta.concrete_fields if field.name != "plan"]
    return ", ".join(names) + f", {PLAN_HASH.format(run=run)} AS plan_md5"


def attach(run: Run) -> Run:
    """Set `run.plan` from the cache by the row's `plan_md5`, reading it once on a miss."""
    plan = _plans.get(run.plan_md5)
    if plan is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT plan::text FROM runs_run WHERE id = %s", [run.pk])
            plan = json.loads(cursor.fetchone()[0])
        if len(_plans) >= LIMIT:
            _plans.clear()
        _plans[run.plan_md5] = plan
    run.plan = plan
    return run
