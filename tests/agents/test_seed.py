from io import StringIO

import pytest
from django.core.management import call_command

from agents import api_keys
from agents.management.commands import seed
from agents.models import Agent, AgentVersion, ApiKey, Deployment, Organization, VersionStatus
from connectors.models import Identity

pytestmark = pytest.mark.django_db


def run_seed() -> str:
    out = StringIO()
    call_command("seed", stdout=out)
    return out.getvalue()


def counts() -> dict[str, int]:
    return {
        "agents": Agent.objects.count(),
        "versions": AgentVersion.objects.count(),
        "organizations": Organization.objects.count(),
        "identities": Identity.objects.count(),
        "deployments": Deployment.objects.count(),
    }


def test_seed_twice_creates_nothing_twice_but_the_api_key():
    run_seed()
    first = counts()

    run_seed()

    assert counts() == first
    assert ApiKey.objects.filter(organization__slug="demo", role=ApiKey.Role.BUILDER).count() == 2


def test_seed_loads_every_template_valid_published_and_deployed_to_demo():
    out = run_seed()

    slugs = {path.stem for path in seed.template_paths()}
    assert len(slugs) >= 3
    demo = Organization.objects.get(slug="demo")
    for version in AgentVersion.objects.select_related("agent"):
        assert version.is_valid, (version.agent.slug, version.validation_errors)
        assert version.status == VersionStatus.PUBLISHED
        assert Deployment.objects.filter(organization=demo, version=version, active=True).exists()
        assert f"{version.agent.slug} v{version.number} (published) {version.agent.name!r}: valid" in out
    assert Agent.objects.count() == len(slugs)
    assert "INVALID" not in out


def test_seed_sets_up_the_demo_organization_with_sandbox_identities():
    run_seed()

    demo = Organization.objects.get(slug="demo")
    assert demo.default_timezone == "America/New_York"
    found = set(demo.identities.values_list("channel", "address", "sandbox"))
    assert found == {
        ("email", "demo@sandbox.lucia.localhost", True),
        ("sms", "+15555550100", True),
        ("slack", "T-DEMO", True),
        ("voice", "+15555550101", True),
    }


def test_seed_prints_a_working_builder_key():
    out = run_seed()

    plain = next(line.strip() for line in out.splitlines() if line.strip().startswith(api_keys.KEY_PREFIX))
    key = api_keys.find_active_key(plain)
    assert key is not None
    assert key.organization.slug == "demo"
    assert key.is_builder
    assert "shown once" in out
