import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.urls import reverse

from connectors import identities
from connectors.admin import parse_secret_lines
from connectors.models import Identity
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

TOKEN = "tw-auth-token-8c1f0e6b2d"


@pytest.fixture
def staff_client(client):
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com", "pw"))
    return client


def raw_row(identity: Identity) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secrets_encrypted, secret_names::text FROM connectors_identity WHERE id = %s",
                       [identity.pk])
        return " ".join(cursor.fetchone())


def test_secrets_are_encrypted_at_rest_and_readable_through_identities():
    identity = identities.create_identity(
        OrganizationFactory(), channel="sms", address="+15555550199", secret_values={"auth_token": TOKEN}
    )

    stored = raw_row(identity)
    assert TOKEN not in stored
    assert "auth_token" in stored
    assert identities.read_secrets(Identity.objects.get(pk=identity.pk)) == {"auth_token": TOKEN}


def test_set_secrets_merges_and_an_empty_value_removes():
    identity = identities.create_identity(
        OrganizationFactory(), channel="sms", address="+15555550198", secret_values={"auth_token": TOKEN, "sid": "AC1"}
    )

    identities.set_secrets(identity, secret_values={"sid": "", "signing": "s3"})

    assert identities.read_secrets(Identity.objects.get(pk=identity.pk)) == {"auth_token": TOKEN, "signing": "s3"}
    assert Identity.objects.get(pk=identity.pk).secret_names == ["auth_token", "signing"]


def test_admin_add_encrypts_secrets_and_never_shows_them(staff_client):
    organization = OrganizationFactory()

    response = staff_client.post(reverse("admin:connectors_identity_add"), {
        "organization": organization.pk, "channel": "sms", "address": "+15555550197", "display_name": "Ops line",
        "active": "on", "secrets": f"auth_token={TOKEN}\naccount_sid=AC42\n",
    })

    assert response.status_code == 302
    identity = Identity.objects.get(address="+15555550197")
    assert TOKEN not in raw_row(identity)
    assert identities.read_secrets(identity) == {"account_sid": "AC42", "auth_token": TOKEN}
    page = staff_client.get(reverse("admin:connectors_identity_change", args=[identity.pk])).content.decode()
    assert TOKEN not in page
    assert "account_sid" in page and "auth_token" in page
    listing = staff_client.get(reverse("admin:connectors_identity_changelist")).content.decode()
    assert TOKEN not in listing


def test_admin_change_keeps_secrets_unless_new_ones_are_typed(staff_client):
    identity = identities.create_identity(
        OrganizationFactory(), channel="email", address="ops@example.com", secret_values={"api_key": TOKEN}
    )
    url = reverse("admin:connectors_identity_change", args=[identity.pk])
    form = {"organization": identity.organization_id, "channel": "email", "address": "ops@example.com",
            "display_name": "Renamed", "active": "on", "secrets": ""}

    staff_client.post(url, form)
    assert identities.read_secrets(Identity.objects.get(pk=identity.pk)) == {"api_key": TOKEN}
    assert Identity.objects.get(pk=identity.pk).display_name == "Renamed"

    staff_client.post(url, {**form, "secrets": "api_key=rotated"})
    assert identities.read_secrets(Identity.objects.get(pk=identity.pk)) == {"api_key": "rotated"}


def test_a_rejected_form_does_not_echo_the_typed_secret(staff_client):
    response = staff_client.post(reverse("admin:connectors_identity_add"), {
        "organization": OrganizationFactory().pk, "channel": "sms", "address": "+15555550196", "active": "on",
        "secrets": f"auth_token={TOKEN}\nthis line is wrong {TOKEN}",
    })

    assert response.status_code == 200
    html = response.content.decode()
    assert "line 2" in html
    assert TOKEN not in html
    assert not Identity.objects.filter(address="+15555550196").exists()


def test_parse_secret_lines():
    assert parse_secret_lines("a=1\n\n b = two=2 \nc=") == {"a": "1", "b": "two=2", "c": ""}


@pytest.mark.parametrize(("channel", "address", "field"), [
    ("sms", "555-0100", "address"), ("voice", "+0555", "address"), ("email", "billing", "address"),
    ("slack", "acme-workspace", "address"),
])
def test_addresses_are_checked_per_channel(channel, address, field):
    with pytest.raises(identities.IdentityRefused) as refused:
        identities.create_identity(OrganizationFactory(), channel=channel, address=address)
    assert refused.value.field == field and address in refused.value.message
    assert not Identity.objects.exists()


def test_addresses_are_stored_normalized_so_case_variants_collide():
    identity = identities.create_identity(OrganizationFactory(), channel="email", address="Billing@Acme.test")
    assert identity.address == "billing@acme.test"
    with pytest.raises(identities.IdentityRefused):
        identities.create_identity(OrganizationFactory(), channel="email", address="BILLING@acme.test")


def test_the_inbound_domain_and_a_taken_address_get_the_same_answer(settings):
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"
    identities.create_identity(OrganizationFactory(), channel="email", address="ap@other.test")
    answers = []
    for address in ("reply+1-abc@in.lucia.test", "anything@mx.in.lucia.test", "ap@other.test"):
        with pytest.raises(identities.IdentityRefused) as refused:
            identities.create_identity(OrganizationFactory(), channel="email", address=address)
        answers.append(refused.value.message)
    assert set(answers) == {identities.UNAVAILABLE}
    assert "organization" not in identities.UNAVAILABLE


def test_sandbox_identities_exist_only_in_simulation_organizations():
    with pytest.raises(identities.IdentityRefused) as refused:
        identities.create_identity(OrganizationFactory(slug="acme"), channel="sms", address="+15550001111",
                                   sandbox=True)
    assert refused.value.field == "sandbox"
    real = identities.create_identity(OrganizationFactory(slug="globex"), channel="sms", address="+15550002222")
    with pytest.raises(identities.IdentityRefused):
        identities.update_identity(real, sandbox=True)

    shadow = identities.create_identity(OrganizationFactory(slug="acme-sim"), channel="sms", address="+15550001111",
                                        sandbox=True)
    assert shadow.sandbox


def test_admin_refuses_a_bad_or_unavailable_address_with_the_same_words_as_the_api(staff_client, settings):
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"
    organization = OrganizationFactory()
    identities.create_identity(OrganizationFactory(), channel="sms", address="+15555550197")

    pages = [staff_client.post(reverse("admin:connectors_identity_add"), {
        "organization": organization.pk, "channel": channel, "address": address, "active": "on", "secrets": "",
    }).content.decode() for channel, address in (("sms", "+1 555 555 0197"), ("email", "ap@in.lucia.test"),
                                                 ("sms", "555"))]

    assert identities.UNAVAILABLE.replace("'", "&#x27;") in pages[0]
    assert identities.UNAVAILABLE.replace("'", "&#x27;") in pages[1]
    assert "is not an E.164 number" in pages[2]
    assert Identity.objects.count() == 1
