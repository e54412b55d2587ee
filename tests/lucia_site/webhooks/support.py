"""Webhook test helpers: identities, runs with contacts, sends, requests signed with the providers' own code."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

from django.test import Client
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier
from twilio.request_validator import RequestValidator

from agents.models import Organization
from connectors import identities
from connectors.models import Identity
from runs.models import Episode, EpisodeStatus, OutboxMessage, Run
from tests.connectors.conftest import AUTH_TOKEN, MAILGUN_SIGNING_KEY, SIGNING_SECRET
from tests.factories import ContactFactory, EpisodeFactory, OrganizationFactory, RunFactory

PUBLIC_URL = "https://lucia.example.com"


def identity(organization: Organization, channel: str, address: str, *, sandbox: bool = False,
             **secrets: str) -> Identity:
    return identities.create_identity(organization, channel=channel, address=address, display_name="Acme",
                                      secret_values=secrets, sandbox=sandbox)


def run_with_contact(organization: Organization | None = None, **contact: str) -> Run:
    """A real (not simulated) open run of the organization with one vendor contact."""
    run = RunFactory(organization=organization or OrganizationFactory())
    ContactFactory(run=run, role="vendor", **contact)
    return run


def sent(run: Run, *, channel: str, idem_key: str, provider_message_id: str = "", tool: str = "") -> OutboxMessage:
    """An outbox row already sent by the run (the webhook tests only need it to exist)."""
    episode = EpisodeFactory(run=run, status=EpisodeStatus.DONE)
    return OutboxMessage.objects.create(
        idem_key=idem_key, run=run, episode=episode, tool=tool or f"send_{channel}", channel=channel,
        recipient="someone", status="sent", provider_message_id=provider_message_id, created_at=timezone.now(),
    )


def inbound_episodes(run: Run) -> list[Episode]:
    return list(Episode.objects.filter(run=run, kind__in=("inbound", "call_report")).order_by("seq"))


def post_twilio(client: Client, path: str, params: dict, *, token: str = AUTH_TOKEN, tamper: dict | None = None):
    """POST as Twilio does: form-encoded, signed over LUCIA_PUBLIC_URL + path (with query) + params."""
    signature = RequestValidator(token).compute_signature(PUBLIC_URL + path, params)
    return client.post(path, data=urlencode({**params, **(tamper or {})}),
                       content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature)


def post_slack(client: Client, payload: dict, *, secret: str = SIGNING_SECRET, headers: dict | None = None,
               timestamp: int | None = None):
    body = json.dumps(payload).encode()
    stamp = str(timestamp or int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    return client.post("/hooks/slack/events/", data=body, content_type="application/json",
                       HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp, HTTP_X_SLACK_SIGNATURE=signature, **(headers or {}))


def mailgun_signature(*, timestamp: str, token: str, key: str = MAILGUN_SIGNING_KEY) -> str:
    """Mailgun's webhook signature: HMAC-SHA256 of timestamp + token (what anymail checks)."""
    return hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
