import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from agents import api_keys
from agents.models import ApiKey
from runs import escalations
from runs.leases import LeaseLost, claim, fence
from runs.models import Episode, Escalation, EscalationKind, Run
from tests.factories import EscalationFactory, OrganizationFactory, api_key_for, deployed_agent, plan_version
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

VENDOR = {"role": "vendor", "name": "Vera", "email": "vera@example.com", "timezone": "Europe/Paris"}


RESUME_EMAIL = {"option": "resume", "text": "email"}
RESUME_FAX = {"option": "resume", "text": "fax"}


def _client(organization) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization)}")
    return client


def _start(client: APIClient, deployment, **overrides):
    body = {"agent": deployment.agent.slug, "goal": "Collect the W-9", "contacts": [VENDOR]} | overrides
    return client.post("/api/v1/runs/", body, format="json")


def test_starting_a_run_through_the_deployment_pins_its_version_and_enqueues_it():
    organization, deployment = deployed_agent()
    response = _start(_client(organization), deployment)

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["agent"], body["version"], body["status"]) == (deployment.agent.slug, deployment.version.number,
                                                                 "active")
    assert [t["key"] for t in body["tasks"]] == ["w9"]
    assert queued_run_ids() == [body["id"]]


def test_bad_contacts_are_a_400_naming_the_field_and_store_nothing():
    organization, deployment = deployed_agent()
    response = _start(_client(organization), deployment, contacts=[VENDOR | {"timezone": "Mars/Base"}])

    assert response.status_code == 400
    assert "contacts[0].timezone" in response.json()
    assert Run.objects.count() == 0
    assert queued_run_ids() == []


def test_an_agent_without_a_deployment_is_a_clear_400():
    organization = OrganizationFactory()
    _, deployment = deployed_agent()
    response = _start(_client(organization), deployment)
    assert response.status_code == 400
    assert "no active deployment" in response.json()["agent"][0]


def test_runs_list_filters_by_status_and_hides_other_organizations():
    organization, deployment = deployed_agent()
    client = _client(organization)
    mine = _start(client, deployment).json()["id"]
    other_org, other_deployment = deployed_agent()
    theirs = _start(_client(other_org), other_deployment).json()["id"]

    listed = [run["id"] for run in client.get("/api/v1/runs/?status=active").json()["results"]]
    assert listed == [mine]
    assert client.get("/api/v1/runs/?status=completed").json()["results"] == []
    assert client.get(f"/api/v1/runs/{theirs}/").status_code == 404
    assert client.get(f"/api/v1/runs/{theirs}/timeline/").status_code == 404
    assert client.get("/api/v1/runs/?status=sleeping").status_code == 400


def test_an_event_is_recorded_once_per_dedupe_key():
    organization, deployment = deployed_agent()
    client = _client(organization)
    run_id = _start(client, deployment).json()["id"]

    first = client.post(f"/api/v1/runs/{run_id}/events/", {"dedupe_key": "crm-1", "text": "paid"}, format="json")
    again = client.post(f"/api/v1/runs/{run_id}/events/", {"dedupe_key": "crm-1", "text": "paid"}, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Episode.objects.filter(run_id=run_id, kind="event").count() == 1


def test_the_timeline_lists_the_start_episode():
    organization, deployment = deployed_agent()
    client = _client(organization)
    run_id = _start(client, deployment).json()["id"]

    items = client.get(f"/api/v1/runs/{run_id}/timeline/").json()
    assert [(item["type"], item["kind"]) for item in items] == [("episode", "start")]


def test_cancel_ends_the_run_fences_out_its_worker_and_refuses_events_after():
    organization, deployment = deployed_agent()
    client = _client(organization)
    run_id = _start(client, deployment).json()["id"]
    epoch = claim(run_id, owner="worker-a")

    response = client.post(f"/api/v1/runs/{run_id}/cancel/", {"reason": "vendor left"}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert Episode.objects.get(run_id=run_id).status == "cancelled"
    with pytest.raises(LeaseLost), fence(run_id, epoch=epoch):
        pass
    late = client.post(f"/api/v1/runs/{run_id}/events/", {"dedupe_key": "late"}, format="json")
    assert late.status_code == 409
    assert client.post(f"/api/v1/runs/{run_id}/cancel/", {}, format="json").status_code == 409


def _question(run: Run):
    epoch = claim(run.pk, owner="worker-a")
    with fence(run.pk, epoch=epoch) as locked:
        escalation = escalations.open_escalation(locked, kind=EscalationKind.QUESTION, prompt="Fax or email?",
                                                 options=["fax", "email"])
    from runs import leases

    leases.release(run.pk, epoch=epoch)
    return escalation


def test_answering_an_escalation_wakes_the_run_with_a_human_answer_episode_once():
    organization, deployment = deployed_agent()
    client = _client(organization)
    run = Run.objects.get(pk=_start(client, deployment).json()["id"])
    escalation = _question(run)

    open_ids = [item["id"] for item in client.get("/api/v1/escalations/?status=open").json()["results"]]
    assert open_ids == [escalation.pk]
    response = client.post(f"/api/v1/escalations/{escalation.pk}/answer/", RESUME_EMAIL, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "answered"
    answer_episode = Episode.objects.get(run=run, kind="human_answer")
    assert answer_episode.payload["answer"] == "email"
    again = client.post(f"/api/v1/escalations/{escalation.pk}/answer/", RESUME_FAX, format="json")
    assert again.status_code == 409


def test_another_organizations_escalation_is_a_404_and_questions_cannot_be_resolved():
    organization, deployment = deployed_agent()
    run = Run.objects.get(pk=_start(_client(organization), deployment).json()["id"])
    escalation = _question(run)

    stranger = _client(OrganizationFactory())
    assert stranger.post(f"/api/v1/escalations/{escalation.pk}/answer/", {"option": "resume", "text": "x"},
                         format="json").status_code == 404
    owner = _client(organization)
    resolved = owner.post(f"/api/v1/escalations/{escalation.pk}/resolve/", {"outcome": "sent"}, format="json")
    assert resolved.status_code == 400


def test_requests_without_a_key_are_refused():
    assert APIClient().get("/api/v1/runs/").status_code in (401, 403)


# --- Who acted ------------------------------------------------------------------------------

STUDIO_KEY_NAME = "Studio, operations.lead@example.com 2026-12-01 09:30"  # how the Studio names keys: > 32 chars


def _key_client(organization, *, name: str = STUDIO_KEY_NAME):
    api_key, plain = api_keys.issue_key(organization, name=name, role=ApiKey.Role.RUNNER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {plain}")
    return api_key, client


def test_a_run_records_the_key_that_started_it_and_the_key_that_cancelled_it():
    organization, deployment = deployed_agent()
    starter, client = _key_client(organization, name="crm sync")
    canceller, other_client = _key_client(organization)

    run_id = _start(client, deployment).json()["id"]
    other_client.post(f"/api/v1/runs/{run_id}/cancel/", {"reason": "duplicate"}, format="json")

    run = Run.objects.get(pk=run_id)
    assert (run.started_by_key, run.started_by, run.cancelled_by_key, run.cancelled_by) == (
        starter, None, canceller, None)


def test_answering_with_a_studio_made_key_stores_the_key_by_reference():
    organization, deployment = deployed_agent()
    api_key, client = _key_client(organization)
    run = Run.objects.get(pk=_start(client, deployment).json()["id"])
    escalation = _question(run)

    response = client.post(f"/api/v1/escalations/{escalation.pk}/answer/", RESUME_EMAIL, format="json")

    assert response.status_code == 200, response.content
    stored = Escalation.objects.get(pk=escalation.pk)
    assert (stored.answered_by_key, stored.answered_by, stored.answered_via) == (api_key, None, "api")


def test_resolving_an_uncertain_send_records_the_key():
    organization, deployment = deployed_agent()
    api_key, client = _key_client(organization)
    run = Run.objects.get(pk=_start(client, deployment).json()["id"])
    escalation = EscalationFactory(run=run, kind=EscalationKind.UNCERTAIN_SEND, prompt="Did it go out?")

    response = client.post(f"/api/v1/escalations/{escalation.pk}/resolve/", {"outcome": "not_sent"}, format="json")

    assert response.status_code == 200, response.content
    stored = Escalation.objects.get(pk=escalation.pk)
    assert (stored.status, stored.answered_by_key, stored.answered_via) == ("resolved", api_key, "api")


def test_a_staff_session_acting_for_the_organization_is_recorded_as_the_user(django_user_model):
    organization, deployment = deployed_agent()
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="act_as_organization"))
    client = APIClient()
    client.force_login(user)
    header = {"HTTP_X_LUCIA_ORGANIZATION": organization.slug}

    run_id = client.post("/api/v1/runs/", {"agent": deployment.agent.slug, "goal": "W-9", "contacts": [VENDOR]},
                         format="json", **header).json()["id"]
    escalation = _question(Run.objects.get(pk=run_id))
    client.post(f"/api/v1/escalations/{escalation.pk}/answer/", RESUME_FAX, format="json", **header)

    run, stored = Run.objects.get(pk=run_id), Escalation.objects.get(pk=escalation.pk)
    assert (run.started_by, run.started_by_key) == (user, None)
    assert (stored.answered_by, stored.answered_by_key, stored.answered_via) == (user, None, "api")


def test_staff_without_the_permission_cannot_start_runs_for_an_organization(django_user_model):
    organization, deployment = deployed_agent()
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True))

    response = client.post("/api/v1/runs/", {"agent": deployment.agent.slug, "goal": "W-9", "contacts": [VENDOR]},
                           format="json", HTTP_X_LUCIA_ORGANIZATION=organization.slug)

    assert response.status_code == 403
    assert "act_as_organization" in response.json()["detail"]
    assert not Run.objects.exists()


# --- Which version a run may start on ------------------------------------------------------


def test_an_explicit_version_that_is_not_deployed_is_a_400_saying_how_to_deploy_it():
    organization, deployment = deployed_agent()
    newer = plan_version(agent=deployment.agent)

    response = _start(_client(organization), deployment, version=newer.number)

    assert response.status_code == 400
    message = response.json()["version"][0]
    assert f"v{newer.number} is not deployed to {organization.slug}" in message
    assert f'POST /api/v1/deployments/ {{"agent": "{deployment.agent.slug}", "version": {newer.number}}}' in message
    assert not Run.objects.exists()


def test_an_explicit_deployed_version_starts_through_its_deployment():
    organization, deployment = deployed_agent()
    response = _start(_client(organization), deployment, version=deployment.version.number)
    assert response.status_code == 201, response.content
    assert Run.objects.get().deployment == deployment


def test_another_organizations_agent_cannot_be_started_even_by_an_explicit_version():
    _, theirs = deployed_agent()
    organization = OrganizationFactory()
    response = _start(_client(organization), theirs, version=theirs.version.number)
    assert response.status_code == 400
    assert f"{theirs.agent.slug} has no published version" in response.json()["version"][0]
    assert not Run.objects.exists()
