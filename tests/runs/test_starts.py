from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from agents.models import Deployment
from runs import starts
from runs.models import Episode, Run
from tests.factories import AgentFactory, OrganizationFactory, deployed_agent, plan_version, tiny_plan
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

VENDOR = {"role": "vendor", "name": "Vera", "email": "vera@example.com", "timezone": "Europe/Paris"}


def _start(organization, deployment, **overrides):
    fields = {"goal": "Collect the W-9", "contacts": [VENDOR], "inputs": {}} | overrides
    return starts.start_run(organization, deployment=deployment, **fields)


@time_machine.travel("2025-03-03 15:00:00Z", tick=False)
def test_a_run_starts_pinned_with_its_plan_contacts_tasks_and_a_start_episode_due_now():
    organization, deployment = deployed_agent()

    run = _start(organization, deployment, external_ref="crm-7")

    assert (run.version, run.deployment, run.plan) == (deployment.version, deployment, deployment.version.compiled)
    assert (run.status, run.state, run.external_ref) == ("active", {"v": 1}, "crm-7")
    assert (run.step_budget, run.token_budget, run.cost_budget) == (50, 10_000, Decimal("1.5"))
    contact = run.contacts.get()
    assert (contact.role, contact.email, contact.timezone) == ("vendor", "vera@example.com", "Europe/Paris")
    assert [(t.key, t.required, t.status) for t in run.tasks.all()] == [("w9", True, "open")]
    episode = Episode.objects.get(run=run)
    assert (episode.seq, episode.kind, episode.status, episode.due_at) == (1, "start", "queued", timezone.now())
    assert queued_run_ids() == [run.pk]


def test_an_explicit_version_runs_only_where_it_is_deployed_and_the_contact_timezone_defaults_to_the_org():
    organization = OrganizationFactory(default_timezone="Asia/Tokyo")
    version = plan_version(agent=AgentFactory(organization=organization))
    vendor = {"role": "vendor", "phone": "+14155550123"}
    with pytest.raises(starts.StartError) as refused:
        starts.start_run(organization, version=version, goal="g", contacts=[vendor])
    assert refused.value.field == "version"
    assert f"is not deployed to {organization.slug}" in refused.value.message
    assert "POST /api/v1/deployments/" in refused.value.message
    assert not Run.objects.exists()

    Deployment.objects.create(organization=organization, agent=version.agent, version=version)
    run = starts.start_run(organization, version=version, goal="g", contacts=[vendor])
    assert run.version == version and run.deployment is None
    assert run.contacts.get().timezone == "Asia/Tokyo"


def test_a_draft_version_runs_only_in_simulation_and_is_not_enqueued():
    organization = OrganizationFactory()
    draft = plan_version(status="draft")
    with pytest.raises(starts.StartError) as error:
        starts.start_run(organization, version=draft, goal="g", contacts=[VENDOR])
    assert error.value.field == "version"

    run = starts.start_run(organization, version=draft, goal="g", contacts=[VENDOR], sim=True,
                           virtual_now=timezone.now().replace(year=2030))
    assert run.sim and run.episodes.get().due_at.year == 2030
    assert queued_run_ids() == []


def test_another_organizations_deployment_is_refused():
    _, deployment = deployed_agent()
    with pytest.raises(starts.StartError) as error:
        _start(OrganizationFactory(), deployment)
    assert error.value.field == "deployment"


def test_an_inactive_deployment_is_refused():
    organization, deployment = deployed_agent()
    Deployment.objects.filter(pk=deployment.pk).update(active=False)
    deployment.refresh_from_db()
    with pytest.raises(starts.StartError):
        _start(organization, deployment)


PLAN_WITH_INPUT = tiny_plan(inputs=[{"key": "invoice", "required": True, "description": ""}])


@pytest.mark.parametrize(("overrides", "field"), [
    ({"goal": "  "}, "goal"),
    ({"contacts": []}, "contacts"),
    ({"contacts": [{**VENDOR, "role": "buyer"}]}, "contacts[0].role"),
    ({"contacts": [VENDOR, VENDOR]}, "contacts[1].role"),
    ({"contacts": [{**VENDOR, "timezone": "Mars/Olympus"}]}, "contacts[0].timezone"),
    ({"contacts": [{**VENDOR, "timezone": "EST5EDT-ish"}]}, "contacts[0].timezone"),
    ({"contacts": [{"role": "vendor", "slack_user": "U123"}]}, "contacts[0]"),
    ({"contacts": [{**VENDOR, "email": "not-an-address"}]}, "contacts[0].email"),
    ({"contacts": [{**VENDOR, "phone": "555-1234"}]}, "contacts[0].phone"),
    ({"contacts": [{**VENDOR, "fax": "+1"}]}, "contacts[0].fax"),
    ({"inputs": []}, "inputs"),
])
def test_bad_input_names_the_field_and_stores_nothing(overrides, field):
    organization, deployment = deployed_agent()
    with pytest.raises(starts.StartError) as error:
        _start(organization, deployment, **overrides)
    assert error.value.field == field
    assert not Run.objects.exists()
    assert queued_run_ids() == []


def test_a_required_input_must_be_given():
    organization, deployment = deployed_agent(PLAN_WITH_INPUT)
    with pytest.raises(starts.StartError) as error:
        _start(organization, deployment)
    assert error.value.field == "inputs.invoice"
    assert _start(organization, deployment, inputs={"invoice": "INV-1"}).inputs == {"invoice": "INV-1"}
