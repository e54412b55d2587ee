"""Writes Identity rows; the only place their secrets are encrypted or read."""

from agents.models import Organization
from connectors import secrets
from connectors.models import Identity


def create_identity(
    organization: Organization,
    *,
    channel: str,
    address: str,
    display_name: str = "",
    secret_values: dict[str, str] | None = None,
    sandbox: bool = False,
) -> Identity:
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
    """Change the descriptive fields; None leaves a field as it is. Channel and address never change."""
    changes = {"display_name": display_name, "sandbox": sandbox, "active": active}
    changed = [name for name, value in changes.items() if value is not None]
    for name in changed:
        setattr(identity, name, changes[name])
    if changed:
        identity.save(update_fields=changed)
    return identity
