import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse

from agents import api_keys, versions
from agents.models import Agent, AgentVersion, Deployment, VersionStatus
from simulator.models import Scorecard, Simulation, SimulationStatus
from tests.factories import (
    AgentFactory,
    OrganizationFactory,
    agent_source,
    draft_version,
    published_version,
    scorecard_for,
)

pytestmark = pytest.mark.django_db

MODELS = ["organization", "apikey", "agent", "agentversion", "deployment"]


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)
    return client


def change_url(version: AgentVersion) -> str:
    return reverse("admin:agents_agentversion_change", args=[version.pk])


@pytest.mark.parametrize("model", MODELS + ["identity"])
def test_changelists_and_add_pages_render(staff_client, model):
    published = published_version()
    versions.deploy(published.agent.organization, published)
    api_keys.issue_key(OrganizationFactory(), name="k")
    app = "connectors" if model == "identity" else "agents"

    assert staff_client.get(reverse(f"admin:{app}_{model}_changelist")).status_code == 200
    add = staff_client.get(reverse(f"admin:{app}_{model}_add"))
    assert add.status_code == (403 if model == "apikey" else 200)


def test_change_pages_render(staff_client):
    published = published_version()
    deployment = versions.deploy(published.agent.organization, published)

    for url in [
        reverse("admin:agents_agent_change", args=[published.agent_id]),
        reverse("admin:agents_organization_change", args=[deployment.organization_id]),
        reverse("admin:agents_deployment_change", args=[deployment.pk]),
        change_url(published),
    ]:
        assert staff_client.get(url).status_code == 200, url


def test_saving_an_invalid_source_shows_each_error_path_above_the_form(staff_client):
    draft = draft_version()

    response = staff_client.post(change_url(draft), {"source": f"slug: {draft.agent.slug}\nname: X\nfolowup: 1\n"},
                                 follow=True)

    html = response.content.decode()
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == change_url(draft)
    assert '<code>folowup</code>' in html
    assert "capabilities is required" in html
    assert AgentVersion.objects.get(pk=draft.pk).compiled is None


def test_saving_a_valid_draft_goes_through_versions(staff_client):
    draft = draft_version(source="slug: nope\n")
    source = agent_source(draft.agent.slug, name="Fixed")

    staff_client.post(change_url(draft), {"source": source})

    stored = AgentVersion.objects.get(pk=draft.pk)
    assert stored.is_valid
    assert stored.source == source
    assert Agent.objects.get(pk=draft.agent_id).name == "Fixed"


def test_adding_a_version_creates_the_next_draft_from_the_latest_source(staff_client):
    published = published_version()
    add_url = reverse("admin:agents_agentversion_add")

    form = staff_client.get(add_url, {"agent": published.agent_id}).content.decode()
    assert "Ask the vendor for their W-9 politely." in form

    staff_client.post(add_url, {"agent": published.agent_id, "source": agent_source(published.agent.slug, name="V2")})

    draft = versions.latest_version(published.agent)
    assert (draft.number, draft.status) == (2, VersionStatus.DRAFT)
    assert draft.created_by.username == "ops"


def test_publish_action_publishes_a_valid_draft_through_the_gate(staff_client):
    draft = draft_version()
    scorecard_for(draft)

    response = staff_client.post(
        reverse("admin:agents_agentversion_changelist"),
        {"action": "publish", "_selected_action": [draft.pk], "post": "yes"},
        follow=True,
    )

    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED
    assert any("Published" in str(message) for message in get_messages(response.wsgi_request))


def test_publish_action_asks_first_and_says_what_the_gate_will_refuse(staff_client):
    ready, unsimulated = draft_version(), draft_version()
    scorecard_for(ready)

    response = staff_client.post(reverse("admin:agents_agentversion_changelist"),
                                 {"action": "publish", "_selected_action": [ready.pk, unsimulated.pk]})

    html = response.content.decode()
    assert 'id="lucia-confirm-publish-selected"' in html
    assert "simulate it first" in html and "ready" in html
    assert AgentVersion.objects.get(pk=ready.pk).status == VersionStatus.DRAFT


def test_publish_action_refuses_an_invalid_draft_and_says_why(staff_client):
    draft = draft_version(source="slug: x\n")

    response = staff_client.post(
        reverse("admin:agents_agentversion_changelist"),
        {"action": "publish", "_selected_action": [draft.pk], "post": "yes"},
        follow=True,
    )

    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert "publish refused" in response.content.decode()


def test_publish_action_without_a_scorecard_is_refused_by_the_gate(staff_client):
    draft = draft_version()

    response = staff_client.post(
        reverse("admin:agents_agentversion_changelist"),
        {"action": "publish", "_selected_action": [draft.pk], "post": "yes"},
        follow=True,
    )

    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert "simulate it first" in response.content.decode()


def test_simulate_action_queues_a_background_simulation(staff_client):
    draft = draft_version()

    response = staff_client.post(
        reverse("admin:agents_agentversion_changelist"),
        {"action": "simulate", "_selected_action": [draft.pk]},
        follow=True,
    )

    simulation = Simulation.objects.get(version=draft)
    assert simulation.status == SimulationStatus.QUEUED
    assert not Scorecard.objects.filter(version=draft).exists()  # nothing ran inside the request
    assert f"simulation #{simulation.pk} queued" in response.content.decode()


def test_retire_action(staff_client):
    published = published_version()

    staff_client.post(reverse("admin:agents_agentversion_changelist"),
                      {"action": "retire", "_selected_action": [published.pk]})

    assert AgentVersion.objects.get(pk=published.pk).status == VersionStatus.RETIRED


def test_a_published_version_page_has_no_editable_source(staff_client):
    published = published_version()

    html = staff_client.get(change_url(published)).content.decode()

    assert 'name="source"' not in html
    assert "<textarea" not in html
    assert "Ask the vendor for their W-9 politely." in html
    assert 'name="_validate"' not in html
    assert 'id="lucia-publish"' not in html


def test_posting_to_a_published_version_changes_nothing(staff_client):
    published = published_version()

    response = staff_client.post(change_url(published), {"source": "slug: hacked\n"})

    assert response.status_code == 403
    assert AgentVersion.objects.get(pk=published.pk).source != "slug: hacked\n"


def test_published_versions_cannot_be_deleted_from_the_studio(staff_client):
    published = published_version()

    response = staff_client.get(reverse("admin:agents_agentversion_delete", args=[published.pk]))

    assert response.status_code == 403


def test_only_superusers_delete(client):
    organization = OrganizationFactory()
    staff = get_user_model().objects.create_user("staff", "s@example.com", "pw", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="agents"))
    client.force_login(staff)

    response = client.get(reverse("admin:agents_organization_delete", args=[organization.pk]))

    assert response.status_code == 403


def test_issue_key_action_shows_the_plain_key_once(staff_client):
    organization = OrganizationFactory(slug="acme")

    response = staff_client.post(
        reverse("admin:agents_organization_changelist"),
        {"action": "issue_builder_key", "_selected_action": [organization.pk]},
        follow=True,
    )

    plain = re.search(r"lucia_[A-Za-z0-9_-]{20,}", response.content.decode()).group(0)
    key = api_keys.find_active_key(plain)
    assert key.organization == organization and key.is_builder
    again = staff_client.get(reverse("admin:agents_organization_change", args=[organization.pk])).content.decode()
    assert plain not in again


def test_deploy_from_the_studio_replaces_the_active_deployment(staff_client):
    organization = OrganizationFactory()
    first = published_version(AgentFactory(organization=organization))
    versions.deploy(organization, first)
    versions.edit(first.agent, source=agent_source(first.agent.slug, name="Two"))
    second = versions.publish(versions.latest_version(first.agent))

    staff_client.post(reverse("admin:agents_deployment_add"), {"organization": organization.pk, "version": second.pk})

    active = Deployment.objects.get(organization=organization, active=True)
    assert active.version == second


def test_deploying_a_draft_from_the_studio_is_refused(staff_client):
    organization = OrganizationFactory()
    draft = draft_version(AgentFactory(organization=organization))

    response = staff_client.post(
        reverse("admin:agents_deployment_add"), {"organization": organization.pk, "version": draft.pk}
    )

    assert response.status_code == 200
    assert "only published versions can be deployed" in response.content.decode()
    assert not Deployment.objects.exists()


def test_adding_an_agent_then_following_its_draft_link(staff_client):
    organization = OrganizationFactory()
    response = staff_client.post(reverse("admin:agents_agent_add"),
                                 {"organization": organization.pk, "slug": "w9", "name": "W-9", "description": ""})
    agent = Agent.objects.get(slug="w9")
    assert response.status_code == 302
    assert agent.organization == organization

    page = staff_client.get(reverse("admin:agents_agent_change", args=[agent.pk])).content.decode()
    assert f"?agent={agent.pk}" in page and "Write the first version" in page

    draft = draft_version(agent)
    page = staff_client.get(reverse("admin:agents_agent_change", args=[agent.pk])).content.decode()
    assert change_url(draft) in page and "Edit draft v1" in page


def test_copy_into_my_organization_action_copies_a_template(staff_client):
    template = published_version(AgentFactory(organization=None, slug="w9")).agent
    organization = OrganizationFactory()

    response = staff_client.post(
        reverse("admin:agents_agent_changelist"),
        {"action": "copy_into_organization", "_selected_action": [template.pk], "organization": organization.pk},
        follow=True,
    )

    copy = Agent.objects.get(organization=organization, slug="w9")
    assert [v.status for v in copy.versions.all()] == [VersionStatus.DRAFT]
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(m.startswith(f"Copied w9 into {organization.slug} as draft v1") for m in said), said


def test_template_versions_are_view_only_and_never_published_or_retired_from_the_studio(staff_client):
    template = AgentFactory(organization=None, slug="w9")
    published = published_version(template)
    draft = versions.edit(template, source=agent_source("w9", name="Edited"))
    scorecard_for(draft)

    staff_client.post(change_url(draft), {"source": agent_source("w9", name="Hacked")})
    for action, version in (("publish", draft), ("retire", published)):
        response = staff_client.post(reverse("admin:agents_agentversion_changelist"),
                                     {"action": action, "_selected_action": [version.pk], "post": "yes"},
                                     follow=True)
        assert any("is a template and read-only" in str(m) for m in get_messages(response.wsgi_request))

    assert AgentVersion.objects.get(pk=draft.pk).source == agent_source("w9", name="Edited")
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert AgentVersion.objects.get(pk=published.pk).status == VersionStatus.PUBLISHED


def test_deploying_another_organizations_version_from_the_studio_is_refused(staff_client):
    theirs = published_version()
    organization = OrganizationFactory()

    response = staff_client.post(
        reverse("admin:agents_deployment_add"), {"organization": organization.pk, "version": theirs.pk}
    )

    assert response.status_code == 200
    assert "deploys only its own agents" in response.content.decode()
    assert not Deployment.objects.exists()
