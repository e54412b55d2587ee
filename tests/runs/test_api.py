import pytest
from rest_framework.test import APIClient

from runs import escalations
from runs.leases import LeaseLost, claim, fence
from runs.models import Episode, EscalationKind, Run
from tests.factories import OrganizationFactory, api_key_for, deployed_agent
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

VENDOR = {"role": "vendor", "name": "Vera", "email": "vera@example.com", "timezone": "Europe/Paris"}


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
    response = client.post(f"/api/v1/escalations/{escalation.pk}/answer/", {"answer": "email"}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "answered"
    answer_episode = Episode.objects.get(run=run, kind="human_answer")
    assert answer_episode.payload["answer"] == "email"
    again = client.post(f"/api/v1/escalations/{escalation.pk}/answer/", {"answer": "fax"}, format="json")
    assert again.status_code == 409


def test_another_organizations_escalation_is_a_404_and_questions_cannot_be_resolved():
    organization, deployment = deployed_agent()
    run = Run.objects.get(pk=_start(_client(organization), deployment).json()["id"])
    escalation = _question(run)

    stranger = _client(OrganizationFactory())
    assert stranger.post(f"/api/v1/escalations/{escalation.pk}/answer/", {"answer": "x"},
                         format="json").status_code == 404
    owner = _client(organization)
    resolved = owner.post(f"/api/v1/escalations/{escalation.pk}/resolve/", {"outcome": "sent"}, format="json")
    assert resolved.status_code == 400


def test_requests_without_a_key_are_refused():
    assert APIClient().get("/api/v1/runs/").status_code in (401, 403)
