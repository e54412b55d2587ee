import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from simulator import generator
from simulator.models import EvalCase, EvalCaseStatus
from tests.factories import draft_version, scorecard_for
from tests.simulator.conftest import collector_draft

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com", "pw"))
    return client


def test_scorecard_pages_are_read_only_and_show_the_cases(staff_client):
    card = scorecard_for(draft_version(), passed=False)

    listing = staff_client.get(reverse("admin:simulator_scorecard_changelist"))
    detail = staff_client.get(reverse("admin:simulator_scorecard_change", args=[card.pk]))

    assert listing.status_code == detail.status_code == 200
    assert "0/1" in listing.content.decode()
    assert "expected escalated=true, got false" in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()


def test_approve_and_reject_actions_decide_proposed_cases(staff_client):
    first, second, *_ = generator.propose(collector_draft())
    url = reverse("admin:simulator_evalcase_changelist")

    staff_client.post(url, {"action": "approve", "_selected_action": [first.pk]})
    staff_client.post(url, {"action": "reject", "_selected_action": [second.pk]})

    assert EvalCase.objects.get(pk=first.pk).status == EvalCaseStatus.APPROVED
    assert EvalCase.objects.get(pk=first.pk).approved_by.username == "ops"
    assert EvalCase.objects.get(pk=second.pk).status == EvalCaseStatus.REJECTED
    assert staff_client.get(reverse("admin:simulator_evalcase_change", args=[first.pk])).status_code == 200
    assert staff_client.get(reverse("admin:simulator_simulation_changelist")).status_code == 200


def test_scorecard_pages_show_only_the_users_organizations(client):
    from tests.agents.builder_helpers import BUILDER_PERMISSIONS, staff_user
    from tests.factories import AgentFactory, OrganizationFactory

    mine, theirs = OrganizationFactory(slug="acme"), OrganizationFactory(slug="globex")
    client.force_login(staff_user("bea", permissions=BUILDER_PERMISSIONS, organizations=[mine]))
    own = scorecard_for(draft_version(AgentFactory(organization=mine, slug="own-agent")))
    other = scorecard_for(draft_version(AgentFactory(organization=theirs, slug="their-agent")))

    listing = client.get(reverse("admin:simulator_scorecard_changelist")).content.decode()

    assert "own-agent" in listing and "their-agent" not in listing
    assert client.get(reverse("admin:simulator_scorecard_change", args=[own.pk])).status_code == 200
    assert client.get(reverse("admin:simulator_scorecard_change", args=[other.pk])).status_code in (302, 404)
