from django.db import models
from django.db.models import Q

from agents.models import Organization


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    SMS = "sms", "SMS"
    SLACK = "slack", "Slack"
    VOICE = "voice", "Voice"
    SANDBOX = "sandbox", "Sandbox"


class Identity(models.Model):
    """An organization's presence on a channel: a mailbox, a Slack bot, a phone number."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="identities")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # Mailbox address, Slack team id, or E.164 number.
    address = models.CharField(max_length=254)
    display_name = models.CharField(max_length=200, blank=True)
    # Fernet token of a JSON object; written and read only through connectors.identities.
    secrets_encrypted = models.TextField(blank=True, editable=False)
    secret_names = models.JSONField(default=list, blank=True, editable=False)
    sandbox = models.BooleanField(default=False, help_text="Sends are stored, never delivered.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["organization", "channel", "address"]
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "address"], condition=Q(active=True), name="identity_unique_active_address"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_channel_display()} {self.address}"
