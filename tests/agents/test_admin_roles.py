"""The Studio's roles over every admin page: who reads, adds, saves, deletes and acts, and only in their organizations.

The matrix walks every registered model of the Studio's apps, so a page added
later is held to the same rules without a new test.
"""

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.urls import reverse

from agents import roles, versions
from agents.models import Agent
from runs.models import EscalationStatus, Run, RunStatus
from tests.factories import AgentFactory, agent_source, published_version
from tests.studio_world import build_world, studio_user

pytestmark = pytest.mark.django_db

ROLES = [roles.VIEWER, roles.SUPPORT, roles.OPS, roles.BUILDER]
STUDIO_MODELS = sorted(
    f"{model._meta.app_label}.{model._meta.model_name}"
    for model in admin.site._registry if model._meta.app_label in roles.STUDIO_APPS
)
# Which roles may open each model's add page; every other model adds nowhere but in the runtime.
ADDERS = {
    "connectors.identity": {roles.OPS}, "runs.escalationroute": {roles.OPS},
    "agents.agent": {roles.BUILDER}, "agents.agentversion": {roles.BUILDER}, "agents.deployment": {roles.BUILDER},
}
# Which roles get a Save button on an Acme row's page (all others: a read-only page, and a refused POST).
SAVERS = {
    "connectors.identity": {roles.OPS}, "runs.escalationroute": {roles.OPS},
    "simulator.evalcase": {roles.BUILDER},
}


def url(label: str, view: str, *args) -> str:
    return reverse(f"admin:{label.replace('.', '_')}_{view}", args=args)


@pytest.fixture
def world():
    return build_world()


@pytest.fixture
def as_role(client, world):
    def log_in(role: str):
        client.force_login(studio_user(role.lower(), role=role, organizations=[world.acme]))
        return client
    return log_in


def test_ensure_roles_is_idempotent_and_undoes_hand_edits():
    roles.ensure_roles()
    viewer = Group.objects.get(name=roles.VIEWER)
    viewer.permissions.add(*Group.objects.get(name=roles.OPS).permissions.all())
    roles.ensure_roles()

    perms = {f"{p.content_type.app_label}.{p.codename}" for p in Group.objects.get(name=roles.VIEWER).permissions.all()}
    assert perms and all(perm.split(".")[1].startswith("view_") for perm in perms)
    assert "runs.view_run" in perms and "auth.view_user" not in perms
    assert Group.objects.filter(name__in=ROLES).count() == 4


def test_the_migration_made_the_groups():
    ops = Group.objects.get(name=roles.OPS).permissions.values_list("codename", flat=True)
    assert {"change_run", "change_escalation", "lift_suppression", "change_identity"} <= set(ops)
    builder = Group.objects.get(name=roles.BUILDER).permissions.values_list("codename", flat=True)
    assert {"add_agentversion", "change_agentversion", "add_deployment"} <= set(builder)
    assert "change_run" not in builder and "change_escalation" not in builder


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reads_every_page_but_only_its_organizations_rows(as_role, world, role):
    client = as_role(role)
    for label in STUDIO_MODELS:
        response = client.get(url(label, "changelist"))
        assert response.status_code == 200, label
        shown = {row.pk for row in response.context["cl"].result_list}
        if label in world.rows:
            acme_row, globex_row = world.rows[label]
            assert acme_row.pk in shown and globex_row.pk not in shown, label
            assert client.get(url(label, "change", globex_row.pk)).status_code == 302, label  # "does not exist"
        assert "globex" not in response.content.decode().lower(), f"{label} names another organization"


@pytest.mark.parametrize("role", ROLES)
def test_add_save_and_delete_follow_the_role(as_role, world, role):
    client = as_role(role)
    for label in STUDIO_MODELS:
        expected = 200 if role in ADDERS.get(label, set()) else 403
        assert client.get(url(label, "add")).status_code == expected, f"{role} add {label}"
        if label not in world.rows:
            continue
        acme_row = world.rows[label][0]
        page = client.get(url(label, "change", acme_row.pk))
        assert page.status_code == 200, label
        saves = role in SAVERS.get(label, set())
        assert ('name="_save"' in page.content.decode()) == saves, f"{role} Save on {label}"
        if not saves and label != "runs.escalation":  # the escalation page's POST is its answer form
            assert client.post(url(label, "change", acme_row.pk), {}).status_code == 403, f"{role} POST {label}"
        assert client.get(url(label, "delete", acme_row.pk)).status_code == 403, f"{role} delete {label}"


def test_a_viewer_is_offered_no_action_and_no_write_anywhere(as_role, world):
    client = as_role(roles.VIEWER)
    for label in STUDIO_MODELS:
        response = client.get(url(label, "changelist"))
        assert response.context["action_form"] is None, f"actions offered on {label}"
        if label in world.rows:
            page = client.get(url(label, "change", world.rows[label][0].pk)).content.decode()
            page = page.replace('<button type="submit">Log out</button>', "")
            assert 'type="submit"' not in page, f"a submit button on {label}"


def test_a_builder_saves_a_draft_and_nobody_else_does(as_role, world):
    draft = versions.create_draft(world.rows["agents.agent"][0], source=agent_source("acme-w9", name="Next"))
    for role in ROLES:
        page = as_role(role).get(url("agents.agentversion", "change", draft.pk)).content.decode()
        assert ('name="_save"' in page) == (role == roles.BUILDER), role


def test_a_viewer_cannot_cancel_a_run_or_settle_an_escalation(as_role, world):
    client = as_role(roles.VIEWER)
    run = world.rows["runs.run"][0]
    escalation = world.rows["runs.escalation"][0]

    client.post(url("runs.run", "changelist"), {"action": "cancel_runs", "_selected_action": [run.pk]})
    settle = client.post(url("runs.escalation", "change", escalation.pk), {"_option": "resume", "text": "go"})

    assert Run.objects.get(pk=run.pk).status != RunStatus.CANCELLED
    assert settle.status_code == 403
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN


def test_support_settles_but_does_not_cancel_and_ops_cancels(as_role, world):
    run = world.rows["runs.run"][0]
    support = as_role(roles.SUPPORT)
    assert "cancel_runs" not in support.get(url("runs.run", "changelist")).content.decode()
    support.post(url("runs.run", "changelist"), {"action": "cancel_runs", "_selected_action": [run.pk]})
    assert Run.objects.get(pk=run.pk).status != RunStatus.CANCELLED

    ops = as_role(roles.OPS)
    asked = ops.post(url("runs.run", "changelist"), {"action": "cancel_runs", "_selected_action": [run.pk]})
    assert "reason" in asked.content.decode() and Run.objects.get(pk=run.pk).status != RunStatus.CANCELLED
    ops.post(url("runs.run", "changelist"), {"action": "cancel_runs", "_selected_action": [run.pk],
                                             "confirmed": "yes", "reason": "the customer asked"})
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_ops_cannot_cancel_another_organizations_run(as_role, world):
    globex_run = world.rows["runs.run"][1]
    as_role(roles.OPS).post(url("runs.run", "changelist"),
                            {"action": "cancel_runs", "_selected_action": [globex_run.pk]})
    assert Run.objects.get(pk=globex_run.pk).status != RunStatus.CANCELLED


def test_the_timeline_needs_view_run_and_the_users_organization(client, as_role, world):
    acme_run, globex_run = world.rows["runs.run"]
    viewer = as_role(roles.VIEWER)
    assert viewer.get(url("runs.run", "timeline", acme_run.pk)).status_code == 200
    assert viewer.get(url("runs.run", "timeline", globex_run.pk)).status_code == 404
    missing = viewer.get(url("runs.run", "timeline", 999_999))
    assert missing.status_code == 404 and "Lucia Studio" in missing.content.decode()

    client.force_login(studio_user("no-role", organizations=[world.acme]))
    assert client.get(url("runs.run", "timeline", acme_run.pk)).status_code == 403


def test_templates_are_read_by_every_role_and_copied_only_by_a_builder_into_their_organization(as_role, world):
    template = published_version(AgentFactory(organization=None, slug="w9-template")).agent
    copy = {"action": "copy_into_organization", "_selected_action": [template.pk]}

    viewer = as_role(roles.VIEWER)
    assert viewer.get(url("agents.agent", "change", template.pk)).status_code == 200
    viewer.post(url("agents.agent", "changelist"), {**copy, "organization": world.acme.pk})
    assert not Agent.objects.filter(slug="w9-template", organization=world.acme).exists()

    builder = as_role(roles.BUILDER)
    page = builder.get(url("agents.agent", "changelist"))
    assert list(page.context["action_form"].fields["organization"].queryset) == [world.acme]
    builder.post(url("agents.agent", "changelist"), {**copy, "organization": world.globex.pk})
    assert not Agent.objects.filter(slug="w9-template", organization=world.globex).exists()
    builder.post(url("agents.agent", "changelist"), {**copy, "organization": world.acme.pk})
    assert Agent.objects.filter(slug="w9-template", organization=world.acme).exists()


def test_only_a_superuser_assigns_staff_to_organizations(client, as_role, world):
    assert 'name="staff"' not in as_role(roles.OPS).get(url("agents.organization", "change", world.acme.pk)
                                                        ).content.decode()
    root = studio_user("root", superuser=True)
    ops = studio_user("ops-2", role=roles.OPS)
    client.force_login(root)
    page = client.get(url("agents.organization", "change", world.globex.pk)).content.decode()
    assert 'name="staff"' in page and "selectfilter" in page.lower()

    client.post(url("agents.organization", "change", world.globex.pk), {
        "name": world.globex.name, "slug": world.globex.slug, "default_timezone": "UTC", "staff": [ops.pk],
        "api_keys-TOTAL_FORMS": 1, "api_keys-INITIAL_FORMS": 1, "api_keys-MIN_NUM_FORMS": 0,
        "api_keys-MAX_NUM_FORMS": 1000, "api_keys-0-id": world.rows["agents.apikey"][1].pk,
        "api_keys-0-organization": world.globex.pk,
    })
    assert list(world.globex.staff.all()) == [ops]
