from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.models import Organization

# One answer for every unavailable address (taken by anyone, or reserved), so it reveals no other organization.
ADDRESS_UNAVAILABLE = "This address is not available; use another one."


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
                fields=["channel", "address"], condition=Q(active=True), name="identity_unique_active_address",
                violation_error_message=ADDRESS_UNAVAILABLE,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_channel_display()} {self.address}"


class SandboxMessage(models.Model):
    """What a sandbox identity "sent": stored, never delivered; the simulator reads it."""

    # No index of its own: sandboxmsg_recipient_idx (organization, channel, recipient) leads with it.
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sandbox_messages",
                                     db_index=False)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # Unique: a resend of the same key (crash between send and record) stores nothing new.
    # Unique, without the LIKE index Django makes beside a unique CharField (connectors 0009 dropped it).
    idem_key = models.CharField(max_length=64, unique=True)
    recipient = models.CharField(max_length=254)
    payload = models.JSONField(default=dict)
    provider_message_id = models.CharField(max_length=100)
    # The run's clock when sent (virtual in simulation), so it is a default, not auto_now_add.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["organization", "channel", "recipient"], name="sandboxmsg_recipient_idx")]

    def __str__(self) -> str:
        return f"sandbox {self.channel} to {self.recipient}"


class InboundStatus(models.TextChoices):
    MATCHED = "matched", "Matched"
    UNMATCHED = "unmatched", "Unmatched"
    IGNORED = "ignored", "Ignored"
    # A person looked at an unmatched message and decided no run needs it (triaged_by, triaged_at, triage_note).
    DISMISSED = "dismissed", "Dismissed"


class InboundMessage(models.Model):
    """A message received on a webhook, stored before routing; unmatched ones are kept for triage."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="inbound_messages"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    provider_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, default="message")
    from_address = models.CharField(max_length=254, blank=True)
    to_address = models.CharField(max_length=254, blank=True)
    subject = models.CharField(max_length=998, blank=True)
    text = models.TextField(blank=True)
    attachments = models.JSONField(default=list, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    raw = models.JSONField(default=dict, blank=True)
    # No foreign key: runs sit on a higher floor than connectors.
    matched_run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    status = models.CharField(max_length=16, choices=InboundStatus.choices, default=InboundStatus.UNMATCHED)
    received_at = models.DateTimeField(default=timezone.now)
    # Who settled an unmatched message by hand (attached it to a run, or dismissed it), when, and why.
    triaged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    triaged_at = models.DateTimeField(null=True, blank=True)
    triage_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            # Providers retry webhooks; the same message is stored once.
            models.UniqueConstraint(fields=["channel", "provider_id"], name="inbound_unique_provider_id"),
        ]
        indexes = [models.Index(fields=["status", "received_at"], name="inbound_status_idx")]

    def __str__(self) -> str:
        return f"{self.channel} from {self.from_address} ({self.status})"


class SuppressionReason(models.TextChoices):
    STOP = "stop", "STOP"
    BOUNCE = "bounce", "Bounce"
    COMPLAINT = "complaint", "Complaint"
    INVALID = "invalid", "Invalid address"


class Suppression(models.Model):
    """An address the organization must never contact again on a channel."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="suppressions")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=254)
    reason = models.CharField(max_length=16, choices=SuppressionReason.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["organization", "channel", "address"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "channel", "address"], name="suppression_unique_address"
            ),
        ]
        # Lifting deletes the row and keeps a SuppressionLift (connectors.suppressions.lift); the stock delete
        # permission is not it, since a deleted row would leave no record of who lifted it and why.
        permissions = [("lift_suppression", "Can lift a suppression (audited, with a reason)")]

    def __str__(self) -> str:
        return f"{self.channel} {self.address} ({self.reason})"


class SuppressionLift(models.Model):
    """The record of a lifted suppression: what it was, who lifted it (none: the contact's START), when, why.
    Written only by connectors.suppressions."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="suppression_lifts")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=254)
    reason = models.CharField(max_length=16, choices=SuppressionReason.choices)
    suppressed_at = models.DateTimeField()
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    lifted_at = models.DateTimeField(default=timezone.now)
    note = models.TextField()

    class Meta:
        ordering = ["-lifted_at", "-id"]

    def __str__(self) -> str:
        return f"{self.channel} {self.address} lifted {self.lifted_at:%Y-%m-%d %H:%M}"


class DeliveryEvent(models.Model):
    """A provider tracking event (queued, delivered, bounced...) for one of our sends."""

    channel = models.CharField(max_length=16, choices=Channel.choices)
    provider_message_id = models.CharField(max_length=255, blank=True)
    # Read by Connector.lookup: an event carrying the key proves the provider accepted that send.
    idem_key = models.CharField(max_length=64, blank=True, db_index=True)
    # The provider's id of this event, when it has one; providers retry webhooks.
    provider_event_id = models.CharField(max_length=255, blank=True)
    event_type = models.CharField(max_length=32)
    raw = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "provider_event_id"],
                condition=~Q(provider_event_id=""),
                name="deliveryevent_unique_provider_event",
            ),
        ]
        indexes = [models.Index(fields=["channel", "provider_message_id"], name="deliveryevent_message_idx")]

    def __str__(self) -> str:
        return f"{self.channel} {self.event_type} {self.provider_message_id}"


class Attachment(models.Model):
    """A file that came with a message: its bytes when they arrived, or a record that they did not.

    Evidence checks read only these rows, never a payload's description of a
    file. Written only by connectors.attachments.
    """

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="attachments"
    )
    # Set for files in a provider's webhook; the run is the one the message matched.
    inbound_message = models.ForeignKey(
        InboundMessage, on_delete=models.CASCADE, null=True, blank=True, related_name="files"
    )
    # Set for files given with an API event or a simulated reply. No foreign key: runs sit a floor above.
    run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    filename = models.CharField(max_length=255, blank=True)
    # What the sender said the file is: a claim, shown to people, never checked against a task.
    declared_type = models.CharField(max_length=255, blank=True)
    # What the bytes are (connectors.sniffing); empty when the bytes never arrived.
    sniffed_type = models.CharField(max_length=100, blank=True)
    size = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    content = models.BinaryField(null=True, blank=True, editable=False)
    # False: only a link (Slack, Twilio media) or a file over the size cap; such a file is never evidence.
    stored = models.BooleanField(default=False)
    not_stored_reason = models.CharField(max_length=200, blank=True)
    url = models.URLField(max_length=2000, blank=True)
    # What a text extractor read from the file; only the simulator's personas supply it today.
    text = models.TextField(blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["received_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(stored=False) | (Q(content__isnull=False) & ~Q(sha256="")),
                name="attachment_stored_has_bytes",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.filename or 'attachment'} ({self.sniffed_type or 'not stored'}, {self.size} bytes)"


class WebhookNonce(models.Model):
    """A one-time value of a verified webhook (Mailgun's token, a Slack or Twilio signature), kept until it
    would be refused as stale anyway, so a captured request cannot be replayed. Written by connectors.nonces."""

    provider = models.CharField(max_length=16)
    # sha256 of the value: fixed width, and no signature is kept verbatim.
    digest = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "digest"], name="webhooknonce_unique_digest"),
        ]
        # nonces.prune: DELETE ... WHERE expires_at <= now.
        indexes = [models.Index(fields=["expires_at"], name="webhooknonce_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.provider} nonce until {self.expires_at:%Y-%m-%d %H:%M}"
