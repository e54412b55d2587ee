"""Writes Identity rows; the only place their secrets are encrypted or read, and where addresses are checked.

Inbound is routed by address, so an address is checked before it is stored:
well-formed for its channel and normalized (connectors.addresses), never on
Lucia's own inbound domain, free of any other active identity, and sandbox
only in sandbox organizations (Organization.sandbox). The API and the Studio show the same
answers; an unavailable address gets one message whatever the reason, so
nobody learns that another organization holds it.
"""

from __future__ import annotations

from django.conf import settings

from agents.models import Organization
from connectors import addresses, secrets
from connectors.models import ADDRESS_UNAVAILABLE, Channel, Identity

UNAVAILABLE = ADDRESS_UNAVAILABLE
SANDBOX_ONLY_IN_SIMULATIONS = (
    "Sandbox identities exist only in sandbox organizations (simulations, the demo); use a real address."
)


class IdentityRefused(ValueError):
    """An identity that cannot be stored; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def check_identity(
    organization: Organization, *, channel: str, address: str, sandbox: bool, active: bool = True,
    excluding: Identity | None = None,
) -> str:
    """The normalized address when the identity may be stored; raises IdentityRefused otherwise."""
    if sandbox and not organization.sandbox:
        raise IdentityRefused("sandbox", SANDBOX_ONLY_IN_SIMULATIONS)
    if channel not in Channel.values:
        raise IdentityRefused("channel", f"{channel!r} is not a channel")
    normalized = addresses.normalize(channel, address)
    problem = addresses.format_problem(channel, address.strip())
    if problem:
        raise IdentityRefused("address", problem)
    if channel == Channel.EMAIL and addresses.on_domain(normalized, settings.LUCIA_INBOUND_DOMAIN):
        raise IdentityRefused("address", UNAVAILABLE)
    if active and address_taken(channel, normalized, excluding=excluding):
        raise IdentityRefused("address", UNAVAILABLE)
    return normalized


def address_taken(channel: str, address: str, *, excluding: Identity | None = None) -> bool:
    # Unique across organizations: inbound is routed by address alone.
    taken = Identity.objects.filter(channel=channel, address=address, active=True)
    if excluding is not None and excluding.pk:
        taken = taken.exclude(pk=excluding.pk)
    return taken.exists()


def create_identity(
    organization: Organization,
    *,
    channel: str,
    address: str,
    display_name: str = "",
    secret_values: dict[str, str] | None = None,
    sandbox: bool = False,
) -> Identity:
    """Store a checked identity; raises IdentityRefused (and IntegrityError when a concurrent
    registration of the same address wins)."""
    address = check_identity(organization, channel=channel, address=address, sandbox=sandbox)
    identity = Identity(
        organization=organization, channel=channel, address=address, display_name=display_name, sandbox=sandbox
    )
    _store_secrets(identity, secret_values or {})
    identity.save()
    return identity


def set_secrets(identity: Identity, *, secret_values: dict[str, str]) -> None:
    """Merge new secret values in; an empty value removes that secret."""
    merged = {**secrets.decrypt(identity.secrets_encrypted), **secret_values}
    _store_secrets(identity, {name: value for name, value in merged.items() if value})
    identity.save(update_fields=["secrets_encrypted", "secret_names"])


def read_secrets(identity: Identity) -> dict[str, str]:
    return secrets.decrypt(identity.secrets_encrypted)


def _store_secrets(identity: Identity, values: dict[str, str]) -> None:
    identity.secrets_encrypted = secrets.encrypt(values) if values else ""
    identity.secret_names = sorted(values)


def update_identity(
    identity: Identity,
    *,
    display_name: str | None = None,
    sandbox: bool | None = None,
    active: bool | None = None,
) -> Identity:
    """Change the descriptive fields; None leaves a field as it is. Channel and address never change.
    Turning sandbox on or reactivating re-checks the identity (raises IdentityRefused)."""
    if (sandbox and not identity.sandbox) or (active and not identity.active):
        check_identity(identity.organization, channel=identity.channel, address=identity.address,
                       sandbox=bool(sandbox if sandbox is not None else identity.sandbox), excluding=identity)
    changes = {"display_name": display_name, "sandbox": sandbox, "active": active}
    changed = [name for name, value in changes.items() if value is not None]
    for name in changed:
        setattr(identity, name, changes[name])
    if changed:
        identity.save(update_fields=changed)
    return identity
