"""Store existing identity addresses in connectors.addresses' normal form.

Inbound now matches identities by exact normalized address (never by domain
or case-insensitively), so `Billing@Acme.test` must become `billing@acme.test`
and `+1 (415) 555-0100` `+14155550100`. A row whose normal form another active
identity already holds is left as it is (the unique index would refuse it);
ops can deactivate one of the two.
"""

import re
from email.utils import parseaddr

from django.db import migrations


def _normal(channel: str, address: str) -> str:
    # A frozen copy of connectors.addresses.normalize as of this migration.
    if channel == "email":
        _, addr = parseaddr(address.strip())
        return addr.strip().lower() if "@" in addr else address
    if channel in ("sms", "voice"):
        digits = re.sub(r"[^0-9]", "", address)
        return f"+{digits}" if digits else address
    return address.strip()


def normalize(apps, schema_editor):
    Identity = apps.get_model("connectors", "Identity")
    for identity in Identity.objects.order_by("id"):
        normal = _normal(identity.channel, identity.address)
        if normal == identity.address:
            continue
        if identity.active and Identity.objects.filter(
                channel=identity.channel, address=normal, active=True).exclude(pk=identity.pk).exists():
            continue
        Identity.objects.filter(pk=identity.pk).update(address=normal)


class Migration(migrations.Migration):
    dependencies = [
        ("connectors", "0003_webhook_nonces_and_identity_messages"),
    ]

    operations = [
        migrations.RunPython(normalize, migrations.RunPython.noop),
    ]
