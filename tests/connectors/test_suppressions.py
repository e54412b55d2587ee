"""Lifting a suppression: the row goes, a SuppressionLift keeps what it was, who lifted it, when and why."""

import pytest
from django.contrib.auth import get_user_model

from connectors import suppressions
from connectors.models import Suppression, SuppressionLift
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


def test_a_lift_needs_a_reason_and_is_recorded():
    organization = OrganizationFactory()
    row = suppressions.suppress(organization, channel="sms", address="+1 212 555 0123", reason="stop")
    sam = get_user_model().objects.create_user("sam", password="x" * 16)

    with pytest.raises(suppressions.LiftRefused, match="Say why"):
        suppressions.lift(row, by_user=sam, note="")
    lift = suppressions.lift(row, by_user=sam, note="Asked by phone to hear from us again")

    assert not suppressions.is_suppressed(organization, channel="sms", address="+12125550123")
    assert (lift.address, lift.reason, lift.lifted_by, lift.suppressed_at) == ("+12125550123", "stop", sam,
                                                                               row.created_at)
    with pytest.raises(suppressions.LiftRefused, match="no longer suppressed"):
        suppressions.lift(row, by_user=sam, note="twice")
    assert SuppressionLift.objects.count() == 1


def test_a_start_from_the_contact_is_recorded_as_a_lift_without_a_person():
    organization = OrganizationFactory()
    suppressions.suppress(organization, channel="sms", address="+12125550123", reason="stop")

    assert suppressions.unsuppress(organization, channel="sms", address="+12125550123")
    assert not suppressions.unsuppress(organization, channel="sms", address="+12125550123")

    lift = SuppressionLift.objects.get()
    assert (lift.lifted_by, lift.note) == (None, suppressions.START_NOTE)
    assert not Suppression.objects.exists()
