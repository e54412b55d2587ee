from django.db import models

from runs.models.episode import Episode
from runs.models.run import Run


class JournalKind(models.TextChoices):
    MODEL_CALL = "model_call", "Model call"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    POLICY_BLOCK = "policy_block", "Policy block"
    GUARDRAIL = "guardrail", "Guardrail"
    STATE = "state", "State change"
    NOTE = "note", "Note"
    APPROVAL = "approval", "Approval of a draft"


class JournalEntry(models.Model):
    """Append-only record of what a run did and why. Model calls are replayed from here."""

    # No index of their own: journal_unique_seq (run, seq) and journal_replay (episode, request_hash) lead with
    # them, and every episode writes several entries, each entry an insert into every index.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="journal", db_index=False)
    episode = models.ForeignKey(Episode, null=True, blank=True, on_delete=models.CASCADE, related_name="journal",
                                db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=JournalKind.choices)
    data = models.JSONField(default=dict)
    # For model calls: sha256 of the canonical request; a re-executed episode replays the entry with the same hash.
    request_hash = models.CharField(max_length=64, blank=True)
    model_name = models.CharField(max_length=100, blank=True)
    model_provider = models.CharField(max_length=32, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=10, decimal_places=6, default=0)
    # The run's clock at the time (virtual in a simulation).
    at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        verbose_name_plural = "journal entries"
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="journal_unique_seq")]
        indexes = [models.Index(fields=["episode", "request_hash"], name="journal_replay")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind}"
