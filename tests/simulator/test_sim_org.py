import pytest

from simulator import sim_org
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


def test_shadow_organization_is_a_sandbox_with_sandbox_identities():
    shadow = sim_org.organization_for(OrganizationFactory(slug="acme"))

    assert shadow.slug == "acme-sim"
    assert shadow.sandbox
    assert shadow.identities.filter(sandbox=True, active=True).count() >= 1


def test_real_organization_holding_the_shadow_slug_is_never_simulated_in():
    OrganizationFactory(slug="acme-sim", sandbox=False)

    with pytest.raises(sim_org.NotASandbox, match="not a sandbox organization"):
        sim_org.organization_for(OrganizationFactory(slug="acme"))
