"""Studio staff see only their organizations; superusers see all."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import Organization
from agents.staff import may_see_organization, scope_to_user, visible_organizations

pytestmark = pytest.mark.django_db


def make_user(username: str, **flags):
    return get_user_model().objects.create_user(username, password="x" * 16, is_staff=True, **flags)


def test_staff_see_only_their_organizations_and_superusers_see_all():
    acme = Organization.objects.create(name="Acme", slug="acme")
    globex = Organization.objects.create(name="Globex", slug="globex")
    support = make_user("support")
    acme.staff.add(support)
    root = make_user("root", is_superuser=True)

    assert list(visible_organizations(support)) == [acme]
    assert set(visible_organizations(root)) == {acme, globex}
    assert list(scope_to_user(Organization.objects.all(), support, "pk")) == [acme]
    assert may_see_organization(support, acme) and not may_see_organization(support, globex)


def test_inactive_or_non_staff_users_see_nothing():
    acme = Organization.objects.create(name="Acme", slug="acme")
    former = make_user("former", is_active=False)
    customer = get_user_model().objects.create_user("customer", password="x" * 16)
    acme.staff.add(former, customer)

    assert not visible_organizations(former).exists()
    assert not visible_organizations(customer).exists()
    assert not scope_to_user(Organization.objects.all(), former, "pk").exists()
