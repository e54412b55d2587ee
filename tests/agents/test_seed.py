from io import StringIO

import pytest
from django.core.management import call_command

from agents import api_keys
from agents.management.commands import seed
from agents.models import Agent, AgentVersion, ApiKey, Deployment, Organization, VersionStatus
from connectors.models import Identity
from simulator.models import Scorecard
from tests.simulator.conftest import FakeResult

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cases_pass_without_simulating(monkeypatch):
    """Seeding's subject is publishing through the gate and setting up the demo: the golden cases' verdicts on the
    real engine are tests/simulator/test_golden_cases.py's (simulating them all here again cost minutes)."""
    from simulator import engine

    def passing(version, case, **kwargs) -> FakeResult:
        return FakeResult(name=case["name"], passed=True, metrics={"messages": 1, "episodes": 1})

    monkeypatch.setattr(engine, "run_case", passing)


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


def test_seed_publishes_every_template_sets_up_the_demo_organization_and_runs_again_without_duplicates():
    out = run_seed()

    slugs = {path.stem for path in seed.template_paths()}
    assert len(slugs) >= 3
    demo = Organization.objects.get(slug="demo")
    # Templates belong to no organization; the demo organization deploys its own copies.
    assert set(Agent.objects.filter(organization=None).values_list("slug", flat=True)) == slugs
    assert set(Agent.objects.filter(organization=demo).values_list("slug", flat=True)) == slugs
    assert Agent.objects.count() == 2 * len(slugs)
    assert demo.default_timezone == "America/New_York"
    for version in AgentVersion.objects.select_related("agent__organization"):
        owner = version.agent.organization
        assert version.is_valid, (version.agent.slug, version.validation_errors)
        assert version.status == VersionStatus.PUBLISHED, out
        assert version.gate_scorecard["passed"] is True
        deployed = Deployment.objects.filter(organization=demo, version=version, active=True).exists()
        assert deployed == (owner == demo)
        label = f"{owner.slug if owner else 'template'}/{version.agent.slug}"
        assert f"{label} v{version.number} (published) {version.agent.name!r}: valid" in out
    # The demo copies were simulated in the demo organization's shadow, not in the demo organization itself.
    demo_cards = Scorecard.objects.filter(version__agent__organization=demo, simulation__organization__slug="demo-sim")
    assert demo_cards.count() == len(slugs)
    assert "INVALID" not in out and "refused" not in out
    assert set(demo.identities.values_list("channel", "address", "sandbox")) == {
        ("email", "demo@sandbox.lucia.localhost", True),
        ("sms", "+15555550100", True),
        ("slack", "TDEMO", True),
        ("voice", "+15555550101", True),
    }
    plain = next(line.strip() for line in out.splitlines() if line.strip().startswith(api_keys.KEY_PREFIX))
    key = api_keys.find_active_key(plain)
    assert (key.organization, key.is_builder) == (demo, True)
    assert "shown once" in out

    first = counts()
    again = run_seed()

    assert counts() == first
    assert ApiKey.objects.filter(organization=demo, role=ApiKey.Role.BUILDER).count() == 2
    assert "created" not in again
