"""Start a run: pin a version, copy its plan, create contacts, tasks and the `start` episode, enqueue.

Everything happens in one transaction; the queue row is part of it (ORM broker).
"""

import json
import re
import zoneinfo
from decimal import Decimal
from functools import cache

from django.db import connection, transaction
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from agents.models import AgentVersion, ApiKey, Deployment, Organization, VersionStatus
from connectors.addresses import E164
from runs import clock, queue, statements
from runs.models import EpisodeKind, Run, TaskStatus

CONTACT_FIELDS = ("role", "name", "email", "phone", "slack_user", "timezone")
# The contact field a channel needs to reach someone (mirrors agents.config.schema_base.CHANNEL_CONTACT_FIELD).
CHANNEL_FIELD = {"email": "email", "sms": "phone", "voice": "phone", "slack": "slack_user"}
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")


class StartError(Exception):
    """Bad input for a new run; `field` names the offending input (e.g. `contacts[0].timezone`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def start_run(
    organization: Organization,
    *,
    version: AgentVersion | None = None,
    deployment: Deployment | None = None,
    goal: str,
    contacts: list[dict],
    inputs: dict | None = None,
    sim: bool = False,
    external_ref: str = "",
    virtual_now=None,
    started_by=None,
    started_by_key: ApiKey | None = None,
) -> Run:
    """Create and enqueue a run. Raises StartError for bad input; nothing is stored then.

    The version comes from the organization's active `deployment`, or is given
    explicitly; a real run needs a published version deployed to the
    organization, a simulated run may use any valid version (drafts are
    simulated before they are published, in the owner's `-sim` shadow).
    `virtual_now` sets a simulated run's clock; `started_by`/`started_by_key`
    record who asked.
    """
    version = _pick_version(organization, version=version, deployment=deployment, sim=sim)
    plan = version.compiled
    inputs = {} if inputs is None else inputs
    if not goal or not goal.strip():
        raise StartError("goal", "must not be empty")
    _check_inputs(plan, inputs)
    rows = [_check_contact(plan, index, entry, organization) for index, entry in enumerate(contacts)]
    _check_roles(plan, rows)
    run = _new_run(organization, version=version, deployment=deployment, goal=goal, inputs=inputs,
                   sim=sim, external_ref=external_ref, virtual_now=virtual_now if sim else None,
                   started_by=started_by, started_by_key=started_by_key)
    with transaction.atomic():
        _insert(run, contacts=rows, tasks=plan.get("tasks", []))
        queue.enqueue_advance(run)
    return run


def _pick_version(
    organization: Organization, *, version: AgentVersion | None, deployment: Deployment | None, sim: bool
) -> AgentVersion:
    if deployment is not None:
        if deployment.organization_id != organization.pk or not deployment.active:
            raise StartError("deployment", "no active deployment with this id in your organization")
        if version is not None and version.pk != deployment.version_id:
            raise StartError("version", "differs from the deployment's version; give one or the other")
        version = deployment.version
    if version is None:
        raise StartError("deployment", "give a deployment or a published version")
    if not sim and version.status != VersionStatus.PUBLISHED:
        raise StartError("version", f"version {version.number} is {version.status}; real runs need a published one")
    if not sim and deployment is None and not _deployed(organization, version):
        raise StartError("version", missing_deployment(organization, version))
    if not version.is_valid:
        raise StartError("version", f"version {version.number} has no valid compiled plan")
    return version


def _deployed(organization: Organization, version: AgentVersion) -> bool:
    return Deployment.objects.filter(organization=organization, version=version, active=True).exists()


def missing_deployment(organization: Organization, version: AgentVersion) -> str:
    """Why a real run cannot start on `version` in `organization`, and how to fix it."""
    agent = version.agent
    return (f"{agent.slug} v{version.number} is not deployed to {organization.slug}; deploy it first with "
            f'POST /api/v1/deployments/ {{"agent": "{agent.slug}", "version": {version.number}}} '
            "(or the Studio's Deployments page)")


def _check_inputs(plan: dict, inputs: dict) -> None:
    if not isinstance(inputs, dict):
        raise StartError("inputs", "must be an object")
    for spec in plan.get("inputs", []):
        if spec.get("required", True) and inputs.get(spec["key"]) in (None, ""):
            raise StartError(f"inputs.{spec['key']}", "is required by this agent")


def _check_contact(plan: dict, index: int, entry: dict, organization: Organization) -> dict:
    where = f"contacts[{index}]"
    if not isinstance(entry, dict):
        raise StartError(where, "must be an object")
    unknown = sorted(set(entry) - set(CONTACT_FIELDS))
    if unknown:
        raise StartError(f"{where}.{unknown[0]}", f"unknown field; use {', '.join(CONTACT_FIELDS)}")
    row = {name: str(entry.get(name) or "").strip() for name in CONTACT_FIELDS}
    spec = _role_spec(plan, row["role"])
    if spec is None:
        roles = ", ".join(c["role"] for c in plan.get("contacts", []))
        raise StartError(f"{where}.role", f"{row['role']!r} is not a contact role of this agent ({roles})")
    row["timezone"] = row["timezone"] or organization.default_timezone
    if row["timezone"] not in _zones():
        raise StartError(f"{where}.timezone", f"unknown timezone {row['timezone']!r}; use an IANA name")
    if row["email"] and not EMAIL.fullmatch(row["email"]):
        raise StartError(f"{where}.email", f"{row['email']!r} is not an email address")
    if row["phone"] and not E164.fullmatch(row["phone"]):
        raise StartError(f"{where}.phone", f"{row['phone']!r} is not an E.164 number like +14155550123")
    channels = spec.get("channels") or plan.get("capabilities", [])
    if not any(row[CHANNEL_FIELD[channel]] for channel in channels if channel in CHANNEL_FIELD):
        needed = sorted({CHANNEL_FIELD[c] for c in channels if c in CHANNEL_FIELD})
        raise StartError(where, f"role {row['role']!r} is reached by {', '.join(channels)}: give {' or '.join(needed)}")
    return row


def _check_roles(plan: dict, rows: list[dict]) -> None:
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if row["role"] in seen:
            raise StartError(f"contacts[{index}].role", f"role {row['role']!r} is given twice")
        seen.add(row["role"])
    for spec in plan.get("contacts", []):
        if spec.get("required", True) and spec["role"] not in seen:
            raise StartError("contacts", f"role {spec['role']!r} is required by this agent")


def _new_run(organization: Organization, *, version: AgentVersion, **fields) -> Run:
    """The Run as it will be stored (not yet saved)."""
    budgets = version.compiled.get("model", {}).get("budgets", {})
    run = Run(organization=organization, version=version, plan=version.compiled, state={"v": 1}, **fields)
    for name, key, cast in (("step_budget", "steps", int), ("token_budget", "tokens", int),
                            ("cost_budget", "cost_usd", lambda v: Decimal(str(v)))):
        if key in budgets:
            setattr(run, name, cast(budgets[key]))
    run.next_wake_at = clock.now(run)
    return run


# The run, its contacts and tasks and its `start` episode, in one statement (INSERT_SQL): each insert as the ORM's
# would store it (the run's columns prepared by its fields, as Model.save; contacts and tasks in the given order).
# The episode is the new run's first: seq 1, no dedupe key to look for (events.schedule_episode's rules).
INSERT_SQL = """
WITH run AS (
    INSERT INTO runs_run (__RUN_COLUMNS__) VALUES (__RUN_VALUES__) RETURNING id, journal_seq
), contacts AS (
    INSERT INTO runs_contact (run_id, role, name, email, phone, slack_user, timezone, history, created_at)
    SELECT run.id, c.role, c.name, c.email, c.phone, c.slack_user, c.timezone, c.history, c.created_at
      FROM run, jsonb_populate_recordset(NULL::runs_contact, %s::jsonb) WITH ORDINALITY AS c
     ORDER BY c.ordinality
), tasks AS (
    INSERT INTO runs_task (run_id, key, title, required, status, done_evidence, done_at)
    SELECT run.id, t.key, t.title, t.required, t.status, t.done_evidence, t.done_at
      FROM run, jsonb_populate_recordset(NULL::runs_task, %s::jsonb) WITH ORDINALITY AS t
     ORDER BY t.ordinality
)
INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, lease_epoch, created_at,
                          started_at, finished_at, error)
SELECT run.id, 1, %s, '{}'::jsonb, 'start', 'queued', %s, 0, NULL, %s, NULL, NULL, '' FROM run
RETURNING run_id, (SELECT journal_seq FROM run)
"""


def _insert(run: Run, *, contacts: list[dict], tasks: list[dict]) -> None:
    """Store `run` (setting its pk) with its contacts, tasks and start episode (INSERT_SQL)."""
    # As the ORM's insert: no primary key (the database's), no generated column.
    fields = [field for field in Run._meta.concrete_fields if not field.primary_key and not field.generated]
    prepared = [field.pre_save(run, add=True) for field in fields]
    # A field's database default (db_default) is the column's DEFAULT, as the ORM's insert leaves it.
    values = [field.get_db_prep_save(value, connection) for field, value in zip(fields, prepared, strict=True)
              if not isinstance(value, DatabaseDefault)]
    sql = INSERT_SQL.replace("__RUN_COLUMNS__", ", ".join(field.column for field in fields)).replace(
        "__RUN_VALUES__", ", ".join("DEFAULT" if isinstance(value, DatabaseDefault) else "%s" for value in prepared))
    now = timezone.now()
    contact_rows = [{**{name: row[name] for name in CONTACT_FIELDS}, "history": [], "created_at": now.isoformat()}
                    for row in contacts]
    task_rows = [{"key": task["key"], "title": task.get("title", ""), "required": task.get("required", True),
                  "status": TaskStatus.OPEN, "done_evidence": None, "done_at": None} for task in tasks]
    with statements.cursor() as cursor:  # bound on the server: the plan travels as a parameter, not as SQL text
        cursor.execute(sql, [*values, json.dumps(contact_rows), json.dumps(task_rows), EpisodeKind.START,
                             run.next_wake_at, now])
        run.pk, run.journal_seq = cursor.fetchone()
    run._state.adding = False


def _role_spec(plan: dict, role: str) -> dict | None:
    return next((c for c in plan.get("contacts", []) if c["role"] == role), None)


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())
