"""Simulations, eval cases and scorecards: the evidence the publish gate reads.

Golden eval cases live in each version's config (`compiled["evals"]`); the
EvalCase table holds the cases the generator proposes for an agent, which
count in scorecards once a builder approves them.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.models import Agent, AgentVersion, Organization


class SimulationStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    PASSED = "passed", "passed"
    FAILED = "failed", "failed"
    ERROR = "error", "error"


class Simulation(models.Model):
    """One simulator invocation over some of a version's cases; `results` holds each case's result dict."""

    version = models.ForeignKey(AgentVersion, on_delete=models.CASCADE, related_name="simulations")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="simulations")
    seed = models.IntegerField(default=0)
    # None: every case runs for its own `weeks`.
    weeks = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=SimulationStatus.choices, default=SimulationStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    results = models.JSONField(default=list, blank=True)
    # Progress, for the Studio to poll while a worker runs it.
    cases_total = models.PositiveIntegerField(default=0)
    cases_done = models.PositiveIntegerField(default=0)
    current_case = models.CharField(max_length=120, blank=True)
    # Set for simulations handed to a worker (scorecards.request); None for ones run in the caller's process.
    queued_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Why a queued simulation ended without a result (status `error`), for the person who asked.
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"simulation #{self.pk} of {self.version} ({self.status})"


class EvalCaseKind(models.TextChoices):
    GOLDEN = "golden", "golden"
    GENERATED = "generated", "generated"


class EvalCaseStatus(models.TextChoices):
    PROPOSED = "proposed", "proposed"
    APPROVED = "approved", "approved"
    REJECTED = "rejected", "rejected"


class EvalCase(models.Model):
    """A case outside a version's config; `spec` has the shape of a compiled `evals` entry."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="eval_cases")
    # Set when the case only fits one version (its ladder or roles); None: every version of the agent.
    version = models.ForeignKey(
        AgentVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_cases"
    )
    name = models.SlugField(max_length=120)
    kind = models.CharField(max_length=16, choices=EvalCaseKind.choices, default=EvalCaseKind.GENERATED)
    status = models.CharField(max_length=16, choices=EvalCaseStatus.choices, default=EvalCaseStatus.PROPOSED)
    spec = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["agent", "name"]
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="evalcase_unique_name_per_agent")]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.name} ({self.kind}, {self.status})"


class Scorecard(models.Model):
    """The outcome of every case that counts for a version, at one config hash; the gate reads the latest."""

    version = models.ForeignKey(AgentVersion, on_delete=models.CASCADE, related_name="scorecards")
    # A draft's config can change under the same id; a scorecard speaks only for the config it ran.
    config_hash = models.CharField(max_length=64)
    passed = models.BooleanField()
    cases = models.JSONField(default=list)  # [{name, kind, passed, reasons, metrics}]
    metrics = models.JSONField(default=dict)  # aggregate over the cases
    seed = models.IntegerField(default=0)
    simulation = models.OneToOneField(
        Simulation, on_delete=models.SET_NULL, null=True, blank=True, related_name="scorecard"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The gate's lookup: the latest scorecard of (version, config_hash).
        indexes = [models.Index(fields=["version", "config_hash", "-created_at"], name="scorecard_latest")]

    def __str__(self) -> str:
        return f"scorecard #{self.pk} of {self.version}: {'passed' if self.passed else 'FAILED'}"
