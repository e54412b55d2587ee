import pytest
from rest_framework.test import APIClient

from agents.models import ApiKey
from connectors import identities
from connectors.models import Identity
from tests.factories import OrganizationFactory, api_key_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/identities/"


def client_for(organization, *, role: str = ApiKey.Role.BUILDER) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization, role=role)}")
    return client


@pytest.fixture
def org():
    return OrganizationFactory()


@pytest.fixture
def builder(org) -> APIClient:
    return client_for(org)


@pytest.fixture
def foreign_identity() -> Identity:
    return identities.create_identity(
        OrganizationFactory(), channel="email", address="ap@other.test", secret_values={"token": "theirs"}
    )


def create_mailbox(client: APIClient, **overrides) -> dict:
    body = {"channel": "email", "address": "ap@acme.test", "display_name": "Acme AP", **overrides}
    response = client.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_secrets_are_stored_encrypted_and_never_returned(builder, org):
    body = create_mailbox(builder, secrets={"smtp_password": "hunter2", "api_token": "t0k"})
    assert body["secret_names"] == ["api_token", "smtp_password"]
    assert "secrets" not in body
    identity = Identity.objects.get(pk=body["id"])
    assert identity.organization == org
    assert "hunter2" not in identity.secrets_encrypted
    assert identities.read_secrets(identity) == {"smtp_password": "hunter2", "api_token": "t0k"}
    fetched = builder.get(f"{URL}{body['id']}/").json()
    assert "secrets" not in fetched and "hunter2" not in str(fetched)


def test_patch_merges_secrets_and_an_empty_value_removes_one(builder):
    created = create_mailbox(builder, secrets={"a": "1", "b": "2"})
    response = builder.patch(f"{URL}{created['id']}/", {"secrets": {"b": "", "c": "3"}}, format="json")
    assert response.status_code == 200
    assert response.json()["secret_names"] == ["a", "c"]
    assert identities.read_secrets(Identity.objects.get(pk=created["id"])) == {"a": "1", "c": "3"}


def test_patch_changes_descriptive_fields_but_not_the_address(builder):
    created = create_mailbox(builder, secrets={"a": "1"})
    url = f"{URL}{created['id']}/"
    response = builder.patch(url, {"display_name": "Payables"}, format="json")
    assert response.json()["display_name"] == "Payables"
    response = builder.patch(url, {"sandbox": True}, format="json")
    assert response.status_code == 400
    assert response.json()["sandbox"] == [identities.SANDBOX_ONLY_IN_SIMULATIONS]
    response = builder.patch(url, {"address": "new@acme.test"}, format="json")
    assert response.status_code == 400
    assert response.json()["address"] == ["Cannot change; create a new identity."]
    identity = Identity.objects.get(pk=created["id"])
    assert identity.address == "ap@acme.test"
    assert identities.read_secrets(identity) == {"a": "1"}


def test_bad_secret_names_are_400(builder):
    response = builder.post(
        URL, {"channel": "email", "address": "ap@acme.test", "secrets": {"has space": "x"}}, format="json"
    )
    assert response.status_code == 400
    assert "has space" in response.json()["secrets"][0]
    assert not Identity.objects.exists()


def test_an_active_address_cannot_be_registered_twice_even_by_another_org(builder, foreign_identity):
    response = builder.post(URL, {"channel": "email", "address": "ap@other.test"}, format="json")
    assert response.status_code == 400
    # The same answer as any unavailable address: nothing says another organization holds it.
    assert response.json()["address"] == [identities.UNAVAILABLE]
    assert Identity.objects.count() == 1


def test_delete_deactivates_and_frees_the_address(builder):
    created = create_mailbox(builder, secrets={"a": "1"})
    assert builder.delete(f"{URL}{created['id']}/").status_code == 204
    assert builder.get(f"{URL}{created['id']}/").json()["active"] is False
    again = create_mailbox(builder)
    assert again["id"] != created["id"]
    # Reactivating the old one would now clash with the new one.
    response = builder.patch(f"{URL}{created['id']}/", {"active": True}, format="json")
    assert response.status_code == 400


def test_another_organizations_identity_is_404_for_every_method(builder, foreign_identity):
    url = f"{URL}{foreign_identity.pk}/"
    assert builder.get(URL).json()["count"] == 0
    assert builder.get(url).status_code == 404
    assert builder.patch(url, {"secrets": {"token": "mine"}}, format="json").status_code == 404
    assert builder.delete(url).status_code == 404
    stored = Identity.objects.get(pk=foreign_identity.pk)
    assert stored.active is True
    assert identities.read_secrets(stored) == {"token": "theirs"}


def test_organization_in_the_body_is_ignored(builder, org):
    other = OrganizationFactory()
    created = create_mailbox(builder, organization=other.pk)
    assert Identity.objects.get(pk=created["id"]).organization == org
    builder.patch(f"{URL}{created['id']}/", {"organization": other.pk}, format="json")
    assert Identity.objects.get(pk=created["id"]).organization == org


def test_runner_key_reads_identities_but_cannot_change_them(org):
    identity = identities.create_identity(org, channel="sms", address="+15550100")
    runner = client_for(org, role=ApiKey.Role.RUNNER)
    assert [row["address"] for row in runner.get(URL).json()["results"]] == ["+15550100"]
    response = runner.post(URL, {"channel": "sms", "address": "+15550101"}, format="json")
    assert response.status_code == 403
    assert "builder API key" in response.json()["detail"]
    assert runner.patch(f"{URL}{identity.pk}/", {"display_name": "x"}, format="json").status_code == 403
    assert runner.delete(f"{URL}{identity.pk}/").status_code == 403
    assert Identity.objects.get(pk=identity.pk).active is True


def test_request_without_a_key_is_401():
    assert APIClient().get(URL).status_code == 401


@pytest.mark.parametrize(("body", "field"), [
    ({"channel": "sms", "address": "555-0100"}, "address"),
    ({"channel": "slack", "address": "my-workspace"}, "address"),
    ({"channel": "email", "address": "reply+1-x@in.lucia.test"}, "address"),
    ({"channel": "sms", "address": "+15550001111", "sandbox": True}, "sandbox"),
])
def test_bad_unavailable_or_sandbox_addresses_are_400_naming_the_field(builder, settings, body, field):
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"
    response = builder.post(URL, body, format="json")
    assert response.status_code == 400 and field in response.json()
    assert not Identity.objects.exists()


def test_an_address_is_stored_in_normal_form(builder):
    response = builder.post(URL, {"channel": "sms", "address": "+1 (415) 555-0100"}, format="json")
    assert response.status_code == 201 and response.json()["address"] == "+14155550100"
