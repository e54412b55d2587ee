import pytest

from connectors import identities
from lucia_site.webhooks.checks import check_webhooks
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


def _ids() -> list[str]:
    return [problem.id for problem in check_webhooks(None)]


def test_an_active_email_identity_without_any_mailgun_signing_key_is_an_error(settings):
    settings.ANYMAIL = {}
    assert "lucia.E006" not in _ids(), "no email identity, nothing to sign"
    identity = identities.create_identity(OrganizationFactory(), channel="email", address="ap@acme.test")
    assert "lucia.E006" in _ids()

    identities.set_secrets(identity, secret_values={"webhook_signing_key": "own-key"})
    assert "lucia.E006" not in _ids()
    identities.set_secrets(identity, secret_values={"webhook_signing_key": ""})
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": "site-key"}
    assert "lucia.E006" not in _ids()


def test_sandbox_or_inactive_email_identities_need_no_key(settings):
    settings.ANYMAIL = {}
    identities.create_identity(OrganizationFactory(slug="x-sim"), channel="email", address="a@x.test", sandbox=True)
    gone = identities.create_identity(OrganizationFactory(), channel="email", address="b@x.test")
    identities.update_identity(gone, active=False)
    assert "lucia.E006" not in _ids()


@pytest.mark.parametrize(("seconds", "error"), [(299, True), (300, False), (900, False), (901, True)])
def test_the_freshness_window_must_stay_between_5_and_15_minutes(settings, seconds, error):
    settings.LUCIA_WEBHOOK_MAX_AGE_S = seconds
    assert ("lucia.E007" in _ids()) is error
