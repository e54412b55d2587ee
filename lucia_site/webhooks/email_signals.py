"""Receivers for anymail's `inbound` and `tracking` signals, sent by its Mailgun views under /hooks/email/.

anymail checked the signature before sending them. Each receiver passes
straight to intake.receive_email; other ESPs' events are not Lucia's (their
views are not mounted) and are ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from anymail.signals import inbound, tracking
from django.dispatch import receiver

from connectors import email
from lucia_site.webhooks import intake

log = logging.getLogger(__name__)
ESP_NAME = "Mailgun"


@receiver(inbound, dispatch_uid="lucia.connectors.email_inbound")
def on_inbound(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    _receive(event, esp_name=esp_name)


@receiver(tracking, dispatch_uid="lucia.connectors.email_tracking")
def on_tracking(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    _receive(event, esp_name=esp_name)


def _receive(event: Any, *, esp_name: str) -> None:
    if esp_name != ESP_NAME:
        log.warning("ignored an anymail event from %s", esp_name)
        return
    intake.receive_email(email.parse_anymail_event(event))
