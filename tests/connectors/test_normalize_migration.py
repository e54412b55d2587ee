import importlib

import pytest
from django.apps import apps

from connectors.models import Identity
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

migration = importlib.import_module("connectors.migrations.0004_normalize_identity_addresses")


def test_existing_addresses_move_to_their_normal_form_unless_another_active_identity_holds_it():
    organization = OrganizationFactory()
    # Rows as earlier code stored them (straight to the table, bypassing today's checks).
    mixed = Identity.objects.create(organization=organization, channel="email", address="Billing@Acme.test")
    spaced = Identity.objects.create(organization=organization, channel="sms", address="+1 (415) 555-0100")
    holder = Identity.objects.create(organization=organization, channel="email", address="ap@acme.test")
    clash = Identity.objects.create(organization=organization, channel="email", address="AP@acme.test")

    migration.normalize(apps, None)

    addresses = dict(Identity.objects.values_list("pk", "address"))
    assert addresses[mixed.pk] == "billing@acme.test" and addresses[spaced.pk] == "+14155550100"
    assert (addresses[holder.pk], addresses[clash.pk]) == ("ap@acme.test", "AP@acme.test")
