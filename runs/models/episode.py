from django.db import models
from django.db.models import Q
from django_fsm import FSMField, FSMModelMixin, transition

from runs.models.run import Run


class EpisodeKind(models.TextChoices):
    START = "start", "Start"
    FOLLOWUP = "followup", "Scheduled follow-up"
    INBOUND = "inbound", "Inbound message"
    CALL_REPORT = "call_report", "Call report"
    HUMAN_ANSWER = "human_answer", "Human answer"
    EVENT = "event", "External event"


class EpisodeStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Episode(FSMModelMixin, models.Model):
    """A trigger and the unit of work: episodes of one run execute one at a time, in seq order."""

    # No index of its own: episode_unique_seq (run, seq) leads with it.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="episodes", db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=EpisodeKind.choices)
    payload = models.JSONField(default=dict, blank=True)
    # Duplicate triggers (webhook retries, double clicks) collide here.
    dedupe_key = models.CharField(max_length=200)
    status = FSMField(default=EpisodeStatus.QUEUED, choices=EpisodeStatus.choices, protected=True)
    due_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    # The lease epoch the current or last attempt ran under.
    lease_epoch = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "dedupe_key"], name="episode_unique_dedupe_key"),
            models.UniqueConstraint(fields=["run", "seq"], name="episode_unique_seq"),
        ]
        indexes = [
            # dispatch_due and the drain loop: queued episodes whose due time has come. These two partial indexes
            # hold every run's queued / running episodes: a statement about one run's episodes finds them by run
            # (episode_unique_seq) or by id, its status test written `(status = ...) IS TRUE` (the same rows: a WHERE
            # keeps only true ones) or as an aggregate's FILTER, so the planner can take it as a filter only. A bare
            # test lets it read one of these indexes instead: planned with statistics from a quiet hour, at a 09:00
            # burst that is thousands of other runs' episodes per statement (tests/runs/test_execution_plans.py).
            models.Index(fields=["due_at"], name="episode_due", condition=Q(status="queued")),
            # The reaper: episodes left running under an expired lease.
            models.Index(fields=["run"], name="episode_running", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} ({self.status})"

    @transition(field=status, source=[EpisodeStatus.QUEUED, EpisodeStatus.RUNNING], target=EpisodeStatus.RUNNING)
    def start(self) -> None:
        self.attempts += 1

    @transition(field=status, source=EpisodeStatus.RUNNING, target=EpisodeStatus.DONE)
    def finish(self) -> None:
        pass

    @transition(field=status, source=[EpisodeStatus.QUEUED, EpisodeStatus.RUNNING], target=EpisodeStatus.FAILED)
    def fail(self) -> None:
        pass

    @transition(field=status, source=EpisodeStatus.RUNNING, target=EpisodeStatus.QUEUED)
    def requeue(self) -> None:
        pass

    @transition(field=status, source=EpisodeStatus.QUEUED, target=EpisodeStatus.CANCELLED)
    def cancel(self) -> None:
        pass
