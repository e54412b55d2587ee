"""Agent builder test helpers: a config with one short eval case, Studio users with explicit permissions,
and running the django-q2 tasks the Studio queued, the way a cluster would (the queue row's func and args)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils.module_loading import import_string

from tests.factories import agent_source

ONE_CASE = """evals:
  - name: sends-the-pdf-next-day
    description: The vendor answers the first email with the signed PDF a day later.
    weeks: 1
    personas:
      vendor:
        name: Dana Whitfield
        traits:
          - type: sends_attachment
            days: 1
            text: Here it is.
            attachment: {{filename: w9.pdf, content_type: application/pdf}}
    expect:
      tasks_done: true
      max_messages: {max_messages}
"""

BUILDER_PERMISSIONS = ["agents.view_agent", "agents.view_agentversion", "agents.add_agentversion",
                       "agents.change_agentversion", "agents.view_deployment", "agents.add_deployment",
                       "simulator.view_scorecard", "simulator.view_simulation"]
VIEWER_PERMISSIONS = ["agents.view_agent", "agents.view_agentversion", "agents.view_deployment",
                      "simulator.view_scorecard", "simulator.view_simulation"]


def source_with_case(slug: str, *, name: str = "W-9 collector", passing: bool = True) -> str:
    """A valid config with one one-week case; `passing=False` expects no message at all, so the case fails."""
    return agent_source(slug, name=name) + ONE_CASE.format(max_messages=3 if passing else 0)


def staff_user(username: str, *, permissions: list[str], organizations=(), superuser: bool = False):
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True, is_superuser=superuser)
    for dotted in permissions:
        app_label, codename = dotted.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    for organization in organizations:
        organization.staff.add(user)
    return get_user_model().objects.get(pk=user.pk)  # a fresh instance: no stale permission cache


def run_queued_tasks() -> list:
    """Run every task waiting in django-q2's ORM queue, oldest first, and delete its row; returns their results."""
    from django_q.models import OrmQ

    results = []
    for row in OrmQ.objects.order_by("id"):
        task = row.task
        row.delete()
        results.append(import_string(task["func"])(*task["args"], **task["kwargs"]))
    return results
