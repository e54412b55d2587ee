"""The Studio's roles: the groups Viewer, Support, Ops and Builder and the permissions each holds.

Which organizations a user sees is decided by Organization.staff (agents.staff);
what they may do there is decided by these groups. `ensure_roles` makes the
groups hold exactly these permissions: it runs in a data migration, after every
`migrate` (so permissions added by later migrations reach the roles) and in the
browser tests, whose flushed database has no groups. A permission added to a
group by hand is removed by the next `ensure_roles`: change the lists here.
"""

from __future__ import annotations

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions

# The apps whose pages make up the Studio; every role may view all of their models.
STUDIO_APPS = ("agents", "connectors", "runs", "simulator")

VIEWER = "Viewer"
SUPPORT = "Support"
OPS = "Ops"
BUILDER = "Builder"

# Beyond viewing. "app.codename" of each permission a role adds.
SUPPORT_PERMISSIONS = (
    "runs.change_escalation",  # answer and settle escalations
    "connectors.change_inboundmessage",  # triage inbound: attach to a run, dismiss
    "connectors.lift_suppression",  # lift a STOP/bounce suppression, with a reason
)
OPS_PERMISSIONS = SUPPORT_PERMISSIONS + (
    "runs.change_run",  # operate runs: cancel, retry, wake, reschedule, post an event
    "connectors.add_identity",
    "connectors.change_identity",
    "runs.add_escalationroute",
    "runs.change_escalationroute",
)
BUILDER_PERMISSIONS = (
    "agents.add_agent",  # new agents and copies of templates into the builder's organizations
    "agents.add_agentversion",
    "agents.change_agentversion",  # edit drafts, validate, simulate, publish, retire
    "agents.add_deployment",
    "simulator.add_simulation",
    "simulator.change_evalcase",  # approve or reject generated eval cases
)
EXTRA_PERMISSIONS = {VIEWER: (), SUPPORT: SUPPORT_PERMISSIONS, OPS: OPS_PERMISSIONS, BUILDER: BUILDER_PERMISSIONS}


def ensure_roles(apps=global_apps) -> None:
    """Create or update the four groups so each holds exactly its permissions (idempotent).

    `apps`: a migration's historical registry, or the global one. Permissions
    are created first (Django makes them only after `migrate`), so this works
    inside a migration and on a freshly flushed database. Raises LookupError
    naming a permission that does not exist (a typo here, or a removed model).
    """
    for label in STUDIO_APPS:
        create_permissions(global_apps.get_app_config(label), apps=apps, verbosity=0)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    viewing = list(Permission.objects.filter(content_type__app_label__in=STUDIO_APPS, codename__startswith="view_"))
    for name, extra in EXTRA_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(viewing + [_permission(Permission, dotted) for dotted in extra])


def _permission(Permission, dotted: str):
    app_label, codename = dotted.split(".")
    found = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
    if found is None:
        raise LookupError(f"permission {dotted} does not exist: fix agents.roles or add it to the model's Meta")
    return found
