from django.conf import settings
from django.db import models
from django.db.models import Q

from agents.models import ApiKey, Organization
from connectors.models import Identity
from runs.models.episode import Episode
from runs.models.outbox import OutboxMessage
from runs.models.run import Run


class EscalationKind(models.TextChoices):
    QUESTION = "question", "Question from the agent"
    UNCERTAIN_SEND = "uncertain_send", "Uncertain send"
    STUCK = "stuck", "Stuck"
    GUARDRAIL_BLOCK = "guardrail_block", "Guardrail block"
    UNMATCHED_INBOUND = "unmatched_inbound", "Unmatched inbound message"
    PROVIDER_OUTAGE = "provider_outage", "Provider outage"
    APPROVAL = "approval", "Draft awaiting approval"
    # A person took the run over (answer handle_myself): the run sends nothing until they finish or hand back.
    HANDOFF = "handoff", "Handled by a human"


class EscalationStatus(models.TextChoices):
    OPEN = "open", "Open"
    ANSWERED = "answered", "Answered"
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"


class Escalation(models.Model):
    """A question for a human. Unmatched inbound messages have no run yet, only an organization."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="escalations")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="escalations")
    episode = models.ForeignKey(Episode, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    outbox_message = models.ForeignKey(
        OutboxMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="escalations"
    )
    # Inbound message id (connectors) for unmatched inbound; kept as a plain id so runs does not import connectors.
    inbound_message_id = models.BigIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32, choices=EscalationKind.choices)
    # The channel a provider outage is about (one open alert per organization and channel); blank otherwise.
    channel = models.CharField(max_length=16, blank=True)
    prompt = models.TextField()
    options = models.JSONField(default=list, blank=True)
    context = models.JSONField(default=dict, blank=True)
    answer = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=EscalationStatus.choices, default=EscalationStatus.OPEN)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who closed it: a person (Studio or a staff API session) and/or the organization's API key.
    answered_by_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    answered_via = models.CharField(max_length=32, blank=True, help_text="admin or api")
    # The run's clock when it was raised (virtual in a simulation); created_at is wall time.
    raised_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    # Wall time at which the ops team is next told (runs.notifications): when raised, then once more past the
    # agent's escalation_sla; null once both notices are queued, or never set (a simulated run's question).
    notify_at = models.DateTimeField(null=True, blank=True)
    notices_queued = models.PositiveSmallIntegerField(default=0)
    # The support agent working on it (the review queue's claim); kept after it closes, as who handled it.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["organization", "status"], name="escalation_org_status"),
            # escalations.take_due_notices: open escalations whose next notice is due.
            models.Index(fields=["notify_at"], name="escalation_notice_due",
                         condition=Q(status="open", notify_at__isnull=False)),
        ]
        constraints = [
            # One open outage alert per organization and channel, however many sends it holds.
            models.UniqueConstraint(fields=["organization", "channel"], name="escalation_one_open_outage",
                                    condition=Q(kind="provider_outage", status="open")),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk} ({self.status})"


class EscalationRoute(models.Model):
    """Where an organization's escalations are announced: an email address (sent from one of its email
    identities) and/or a Slack channel (posted by its Slack identity), outside the ops team's quiet hours."""

    organization = models.OneToOneField(Organization, on_delete=models.CASCADE, related_name="escalation_route")
    email_identity = models.ForeignKey(Identity, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                       help_text="The mailbox the notice is sent from.")
    email_to = models.EmailField(blank=True, help_text="The ops team's address.")
    slack_identity = models.ForeignKey(Identity, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                       help_text="The Slack workspace (bot) that posts the notice.")
    slack_channel = models.CharField(max_length=64, blank=True, help_text="Slack channel id, e.g. C0123ABC.")
    timezone = models.CharField(max_length=64, default="UTC", help_text="The ops team's timezone (IANA name).")
    # Notices falling in [quiet_start, quiet_end) are held until quiet_end (the window may span midnight).
    quiet_start = models.TimeField(null=True, blank=True)
    quiet_end = models.TimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"escalation route of {self.organization}"
