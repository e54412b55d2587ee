import pytest
from rest_framework.test import APIClient

from agents.models import AgentVersion, ApiKey, VersionStatus
from simulator.models import Scorecard
from tests.factories import AgentFactory, OrganizationFactory, api_key_for, draft_version
from tests.simulator.conftest import collector_draft

pytestmark = pytest.mark.django_db


def client_for(role: str, organization=None) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization or OrganizationFactory(), role=role)}")
    return client


@pytest.fixture
def org():
    return OrganizationFactory(slug="acme")


@pytest.fixture
def builder(org) -> APIClient:
    return client_for(ApiKey.Role.BUILDER, org)


# The API simulates the caller's own agents: these drafts belong to the builder's organization.
@pytest.fixture
def good_draft(org) -> AgentVersion:
    return collector_draft(agent=AgentFactory(organization=org, slug="document-collector"))


@pytest.fixture
def broken_draft(org) -> AgentVersion:
    return collector_draft(broken=True, agent=AgentFactory(organization=org, slug="document-collector"))


def url(version: AgentVersion, action: str) -> str:
    return f"/api/v1/agents/{version.agent.slug}/versions/{version.number}/{action}/"


def test_simulate_returns_a_passing_scorecard_and_then_publish_succeeds(builder, good_draft, engine):
    response = builder.post(url(good_draft, "simulate"))

    assert response.status_code == 200
    card = response.json()
    assert card["passed"] is True
    assert card["id"] == Scorecard.objects.get(version=good_draft).pk
    # Simulated in the owner's shadow organization, never in the organization itself.
    assert Scorecard.objects.get(version=good_draft).simulation.organization.slug == "acme-sim"
    assert card["config_hash"] == good_draft.config_hash

    published = builder.post(url(good_draft, "publish"))
    assert published.status_code == 200
    assert published.json()["status"] == VersionStatus.PUBLISHED
    assert AgentVersion.objects.get(pk=good_draft.pk).gate_scorecard["id"] == card["id"]


def test_a_broken_version_fails_its_scorecard_and_publish_answers_409_with_it(builder, broken_draft, engine):
    simulated = builder.post(url(broken_draft, "simulate"))
    assert simulated.status_code == 200
    assert simulated.json()["passed"] is False

    response = builder.post(url(broken_draft, "publish"))

    assert response.status_code == 409
    body = response.json()
    assert body["scorecard"]["id"] == simulated.json()["id"]
    assert body["scorecard"]["passed"] is False
    assert "silent-vendor-escalates" in body["detail"]
    assert AgentVersion.objects.get(pk=broken_draft.pk).status == VersionStatus.DRAFT


def test_publish_without_a_scorecard_is_409(builder, good_draft):
    response = builder.post(url(good_draft, "publish"))

    assert response.status_code == 409
    assert response.json()["scorecard"] is None
    assert "simulate it first" in response.json()["detail"]


def test_simulate_needs_a_builder_key(good_draft):
    response = client_for(ApiKey.Role.RUNNER).post(url(good_draft, "simulate"))

    assert response.status_code == 403
    assert not Scorecard.objects.exists()


def test_simulate_takes_seed_and_weeks(builder, good_draft, fake_engine):
    response = builder.post(url(good_draft, "simulate"), {"seed": 3, "weeks": 2}, format="json")

    assert response.status_code == 200
    assert (response.json()["seed"], response.json()["metrics"]["weeks"]) == (3, 2)


def test_another_organization_cannot_simulate_or_publish_the_agent(good_draft):
    other = client_for(ApiKey.Role.BUILDER)
    assert other.post(url(good_draft, "simulate")).status_code == 404
    assert other.post(url(good_draft, "publish")).status_code == 404
    assert not Scorecard.objects.exists()


def test_simulating_an_invalid_draft_is_409(builder, org):
    draft = draft_version(AgentFactory(organization=org), source="slug: nope\n")

    response = builder.post(url(draft, "simulate"))

    assert response.status_code == 409
    assert "config errors" in response.json()["detail"]
