from django.db import models
from django_fsm import FSMField, FSMModelMixin, transition

from runs.models.episode import Episode
from runs.models.run import Run


class OutboxStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain (a human decides)"
    # Approval mode (runs.approvals): a draft a human approves, edits or rejects before anything is sent.
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    REJECTED = "rejected", "Rejected by a human"


class OutboxMessage(FSMModelMixin, models.Model):
    """One intended send. `idem_key` comes from runtime state, so a re-executed episode finds it again.

    A run's send has a run and an episode. A notice to the organization's ops team about an escalation
    (runs.notifications) has the escalation instead: it is no run's outreach and no customer's contact.
    """

    # Unique, and without the LIKE index Django makes beside a unique CharField (runs 0017 dropped it: nothing
    # queries a prefix). An AlterField of this field would make it again: drop it in that migration too.
    idem_key = models.CharField(max_length=64, unique=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="outbox")
    episode = models.ForeignKey(Episode, null=True, blank=True, on_delete=models.CASCADE, related_name="outbox")
    escalation = models.ForeignKey("runs.Escalation", null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="notices", db_index=False)
    task_key = models.CharField(max_length=64, blank=True)
    tool = models.CharField(max_length=32)
    channel = models.CharField(max_length=16)
    recipient = models.CharField(max_length=254, help_text="Normalized address, number or Slack user.")
    ordinal = models.PositiveIntegerField(default=0)
    payload = models.JSONField(default=dict)
    status = FSMField(default=OutboxStatus.PENDING, choices=OutboxStatus.choices, protected=True)
    provider_message_id = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # The run's clock when the send was decided and when it went out.
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    # A send the window or a per-contact cap held back, or a retry after the provider refused it: pending, and
    # not sent before this instant (the run's clock). On a `sending` row: not looked up before it.
    not_before = models.DateTimeField(null=True, blank=True)
    # Wall time of the latest provider call: the settle window before a lookup runs from here.
    attempted_at = models.DateTimeField(null=True, blank=True)
    # Lookups the provider could not answer for now (unreachable, 5xx); past LUCIA_SEND_LOOKUP_TRIES a human decides.
    lookups = models.PositiveIntegerField(default=0)
    # A message a human sent past the guardrail (answer send_anyway): journaled with who decided.
    human_override = models.BooleanField(default=False)

    class Meta:
        ordering = ["run", "created_at"]
        indexes = [
            models.Index(fields=["status"], name="outbox_status"),
            # Per-contact caps across the organization: recent sends to one recipient.
            models.Index(fields=["recipient", "created_at"], name="outbox_recipient_time"),
            # notifications.send_due: pending notices whose hold is over.
            models.Index(fields=["not_before"], name="outbox_pending_notice",
                         condition=models.Q(status="pending", escalation__isnull=False)),
            # An escalation's notices (`escalation.notices`, and their cascade when an escalation is deleted); a
            # run's sends have none, so only where set, as runs.Run's people.
            models.Index(fields=["escalation"], name="outbox_escalation",
                         condition=models.Q(escalation__isnull=False)),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(run__isnull=False, episode__isnull=False) | models.Q(escalation__isnull=False),
                name="outbox_run_send_or_notice",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} → {self.recipient} ({self.status})"

    @transition(field=status, source=[OutboxStatus.PENDING, OutboxStatus.SENDING], target=OutboxStatus.SENDING)
    def begin_send(self) -> None:
        self.attempts += 1

    @transition(field=status, source=[OutboxStatus.SENDING, OutboxStatus.UNCERTAIN, OutboxStatus.PENDING],
                target=OutboxStatus.SENT)
    def mark_sent(self) -> None:
        pass

    @transition(field=status, source=[OutboxStatus.PENDING, OutboxStatus.SENDING], target=OutboxStatus.FAILED)
    def mark_failed(self) -> None:
        pass

    @transition(field=status, source=OutboxStatus.SENDING, target=OutboxStatus.UNCERTAIN)
    def mark_uncertain(self) -> None:
        pass

    @transition(field=status, source=[OutboxStatus.UNCERTAIN, OutboxStatus.SENDING], target=OutboxStatus.PENDING)
    def mark_not_sent(self) -> None:
        pass

    @transition(field=status, source=OutboxStatus.AWAITING_APPROVAL, target=OutboxStatus.PENDING)
    def approve(self) -> None:
        pass

    @transition(field=status, source=OutboxStatus.AWAITING_APPROVAL, target=OutboxStatus.REJECTED)
    def reject(self) -> None:
        pass
