"""Which class serves which channel. Imported on first use, so a vendor SDK loads only when needed."""

from __future__ import annotations

from django.utils.module_loading import import_string

from connectors import identities
from connectors.base import Connector
from connectors.models import Channel, Identity

CONNECTORS: dict[str, str] = {
    Channel.EMAIL: "connectors.email.EmailConnector",
    Channel.SMS: "connectors.sms.SmsConnector",
    Channel.VOICE: "connectors.voice.VoiceConnector",
    Channel.SLACK: "connectors.slack.SlackConnector",
    Channel.SANDBOX: "connectors.sandbox.SandboxConnector",
}

_classes: dict[str, type[Connector]] = {}


def connector_class(channel: str) -> type[Connector]:
    if channel not in CONNECTORS:
        raise KeyError(f"no connector for channel {channel!r}")
    if channel not in _classes:
        _classes[channel] = import_string(CONNECTORS[channel])
    return _classes[channel]


def connector_for(identity: Identity) -> Connector:
    """The connector for an identity; a sandbox identity stores sends whatever its channel."""
    channel = Channel.SANDBOX if identity.sandbox else identity.channel
    return connector_class(channel)(identity, secrets=identities.read_secrets(identity))
