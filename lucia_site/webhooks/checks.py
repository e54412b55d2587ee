"""System checks for webhook configuration (lucia.E006, lucia.E007)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register
from django.db import DatabaseError

from connectors.email import site_signing_key
from connectors.models import Channel, Identity
from lucia_site.webhooks.recipients import MAILGUN_OWN_KEY

MAX_AGE_RANGE_S = (300, 900)


@register()
def check_webhooks(app_configs, **kwargs) -> list:
    problems = []
    low, high = MAX_AGE_RANGE_S
    if not low <= settings.LUCIA_WEBHOOK_MAX_AGE_S <= high:
        problems.append(Error(
            f"LUCIA_WEBHOOK_MAX_AGE_S={settings.LUCIA_WEBHOOK_MAX_AGE_S} is outside {low}-{high} seconds.",
            hint="Signed webhooks older than this are refused; too short refuses providers' retries, too long "
                 "widens the replay window. Keep the default (300).",
            id="lucia.E007",
        ))
    unsigned = _email_identities_without_signing_key()
    if unsigned:
        problems.append(Error(
            f"{len(unsigned)} active email identit{'y' if len(unsigned) == 1 else 'ies'} but no Mailgun webhook "
            f"signing key (e.g. {unsigned[0]}): every inbound mail and tracking event would be refused.",
            hint="Set ANYMAIL_MAILGUN_WEBHOOK_SIGNING_KEY, or give the identity a webhook_signing_key secret.",
            id="lucia.E006",
        ))
    return problems


def _email_identities_without_signing_key() -> list[str]:
    if site_signing_key():
        return []
    try:
        live = Identity.objects.filter(channel=Channel.EMAIL, active=True, sandbox=False)
        return [identity.address for identity in live.only("address", "secret_names")
                if MAILGUN_OWN_KEY not in (identity.secret_names or [])]
    except DatabaseError:
        return []  # no database (or not migrated yet): nothing to say about identities
