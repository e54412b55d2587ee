import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agents.models import ApiKey
from connectors import identities
from runs.models import EscalationRoute
from tests.factories import OrganizationFactory, api_key_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/escalation-route/"


def _client(organization, *, role: str = ApiKey.Role.BUILDER) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization, role=role)}")
    return client


def _identities(organization, *, suffix: str = "acme"):
    mailbox = identities.create_identity(organization, channel="email", address=f"lucia@{suffix}.test")
    workspace = identities.create_identity(organization, channel="slack", address=f"T0{suffix.upper()}")
    return mailbox, workspace


def test_a_builder_sets_the_route_through_the_api_and_reads_it_back():
    organization = OrganizationFactory()
    mailbox, workspace = _identities(organization)
    client = _client(organization)
    assert client.get(URL).json() == []

    response = client.post(URL, {"email_identity": mailbox.pk, "email_to": "Ops@Acme.test",
                                 "slack_identity": workspace.pk, "slack_channel": "C0OPS",
                                 "timezone": "Europe/Paris", "quiet_start": "22:00", "quiet_end": "07:00"},
                           format="json")

    assert response.status_code == 200, response.content
    [shown] = client.get(URL).json()
    assert shown | {"updated_at": None} == {
        "email_identity": mailbox.pk, "email_to": "ops@acme.test", "slack_identity": workspace.pk,
        "slack_channel": "C0OPS", "timezone": "Europe/Paris", "quiet_start": "22:00:00", "quiet_end": "07:00:00",
        "updated_at": None}
    replaced = client.post(URL, {"slack_identity": workspace.pk, "slack_channel": "C0OTHER"}, format="json")
    assert replaced.status_code == 200
    route = EscalationRoute.objects.get(organization=organization)
    assert (route.email_identity_id, route.slack_channel, route.timezone) == (None, "C0OTHER", "UTC")


@pytest.mark.parametrize(("body", "field"), [
    ({"email_to": "ops@acme.test"}, "email_to"),
    ({"slack_identity": "EMAIL", "slack_channel": "C0OPS"}, "slack_identity"),
    ({"slack_identity": "SLACK", "slack_channel": "#ops"}, "slack_channel"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"quiet_start": "22:00"}, "quiet_end"),
    ({"email_identity": "THEIRS", "email_to": "ops@acme.test"}, "email_identity"),
    ({"email_identity": 2**70, "email_to": "ops@acme.test"}, "email_identity"),
])
def test_a_route_that_cannot_work_is_a_400_naming_the_field(body, field):
    organization = OrganizationFactory()
    mailbox, workspace = _identities(organization)
    theirs, _ = _identities(OrganizationFactory(), suffix="other")
    ids = {"EMAIL": mailbox.pk, "SLACK": workspace.pk, "THEIRS": theirs.pk}
    body = {name: ids.get(value, value) if isinstance(value, str) else value for name, value in body.items()}

    response = _client(organization).post(URL, body, format="json")

    assert response.status_code == 400 and field in response.json(), response.content
    assert not EscalationRoute.objects.exists()


def test_a_runner_key_reads_but_cannot_set_the_route():
    organization = OrganizationFactory()
    _, workspace = _identities(organization)

    response = _client(organization, role=ApiKey.Role.RUNNER).post(
        URL, {"slack_identity": workspace.pk, "slack_channel": "C0OPS"}, format="json")

    assert response.status_code == 403 and not EscalationRoute.objects.exists()


def test_the_studio_sets_the_route_with_the_same_checks(client):
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    organization = OrganizationFactory()
    mailbox, workspace = _identities(organization)
    theirs, _ = _identities(OrganizationFactory(), suffix="other")
    form = {"organization": organization.pk, "email_identity": theirs.pk, "email_to": "ops@acme.test",
            "slack_identity": workspace.pk, "slack_channel": "C0OPS", "timezone": "America/New_York",
            "quiet_start": "", "quiet_end": ""}

    refused = client.post("/admin/runs/escalationroute/add/", form)
    assert refused.status_code == 200 and "active email identities" in refused.content.decode()
    assert not EscalationRoute.objects.exists()

    saved = client.post("/admin/runs/escalationroute/add/", form | {"email_identity": mailbox.pk})
    assert saved.status_code == 302
    route = EscalationRoute.objects.get(organization=organization)
    assert (route.email_identity, route.slack_channel, route.timezone) == (mailbox, "C0OPS", "America/New_York")
