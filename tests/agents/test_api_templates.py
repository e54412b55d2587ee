"""Templates over the API: every organization reads and copies them; nobody edits or deploys them."""

import pytest
from rest_framework.test import APIClient

from agents import versions
from agents.models import Agent, AgentVersion, ApiKey, Deployment, VersionStatus
from tests.factories import OrganizationFactory, agent_source, api_key_for, published_version, template_agent

pytestmark = pytest.mark.django_db


def client_for(organization, *, role: str = ApiKey.Role.BUILDER) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization, role=role)}")
    return client


@pytest.fixture
def template() -> Agent:
    agent = template_agent("w9")
    published_version(agent)
    return agent


def test_every_organization_reads_templates_with_their_published_config(template):
    for organization in (OrganizationFactory(), OrganizationFactory()):
        client = client_for(organization, role=ApiKey.Role.RUNNER)
        listed = client.get("/api/v1/templates/").json()["results"]
        assert [(row["slug"], row["version"]) for row in listed] == [("w9", 1)]
        assert client.get("/api/v1/templates/w9/").json()["source"] == agent_source("w9")


def test_templates_are_not_agents_of_any_organization(template):
    client = client_for(OrganizationFactory())
    assert client.get("/api/v1/agents/").json()["results"] == []
    assert client.get("/api/v1/agents/w9/").status_code == 404
    assert client.post("/api/v1/agents/w9/versions/", {"source": agent_source("w9")}, format="json").status_code == 404
    publish = client.post("/api/v1/agents/w9/versions/1/publish/")
    assert publish.status_code == 404
    assert 'copy it with POST /api/v1/agents/ {"from_template": "w9"}' in publish.json()["detail"]
    assert client.post("/api/v1/agents/w9/versions/1/retire/").status_code == 404
    assert AgentVersion.objects.filter(agent=template).count() == 1


def test_copying_a_template_makes_the_callers_own_agent_with_a_draft_of_its_config(template):
    organization = OrganizationFactory()
    client = client_for(organization)

    response = client.post("/api/v1/agents/", {"from_template": "w9"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["slug"] == "w9"
    copy = Agent.objects.get(organization=organization, slug="w9")
    draft = AgentVersion.objects.get(agent=copy)
    assert (draft.number, draft.status, draft.source, draft.is_valid) == (1, VersionStatus.DRAFT,
                                                                        agent_source("w9"), True)
    assert client.get("/api/v1/agents/w9/versions/1/").json()["status"] == "draft"
    # The copy is the organization's to edit; the template is untouched.
    edited = client.patch("/api/v1/agents/w9/versions/1/", {"source": agent_source("w9", name="Mine")}, format="json")
    assert edited.status_code == 200
    assert versions.latest_published(template).source == agent_source("w9")


def test_copying_twice_or_an_unknown_template_is_a_400_naming_the_problem(template):
    client = client_for(OrganizationFactory())
    assert client.post("/api/v1/agents/", {"from_template": "w9"}, format="json").status_code == 201
    again = client.post("/api/v1/agents/", {"from_template": "w9"}, format="json")
    unknown = client.post("/api/v1/agents/", {"from_template": "nope"}, format="json")
    mixed = client.post("/api/v1/agents/", {"from_template": "w9", "slug": "x"}, format="json")
    assert (again.status_code, unknown.status_code, mixed.status_code) == (400, 400, 400)
    assert "already has an agent 'w9'" in again.json()["slug"]
    assert "no template 'nope'" in unknown.json()["from_template"]
    assert "slug" in mixed.json()


def test_a_template_cannot_be_deployed_until_copied_and_published(template):
    organization = OrganizationFactory()
    client = client_for(organization)
    response = client.post("/api/v1/deployments/", {"agent": "w9", "version": 1}, format="json")
    assert response.status_code == 400
    assert "copy a template" in response.json()["agent"][0]
    with pytest.raises(versions.NotDeployable):
        versions.deploy(organization, versions.latest_published(template))
    assert not Deployment.objects.exists()


def test_templates_are_read_only_for_every_entry_point_that_checks(template):
    with pytest.raises(versions.TemplateReadOnly):
        versions.refuse_template(template)
    versions.refuse_template(Agent.objects.create(organization=OrganizationFactory(), slug="w9", name="Mine"))
