from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Func, Q, Value
from django_fsm import FSMField, FSMModelMixin, transition

from agents.models import AgentVersion, ApiKey, Deployment, Organization


class RunStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    WAITING = "waiting", "Waiting"
    WAITING_HUMAN = "waiting_human", "Waiting for a human"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


OPEN_RUN_STATUSES = (RunStatus.ACTIVE, RunStatus.WAITING, RunStatus.WAITING_HUMAN)
ENDED_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class Run(FSMModelMixin, models.Model):
    """One agent working on one goal. Everything a wake-up needs is in this row and its children."""

    # Found by organization through run_org_status, which leads with it (an index of its own would only be one
    # more to write on every update of the row that moves its status).
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="runs", db_index=False)
    version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="runs")
    deployment = models.ForeignKey(Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    sim = models.BooleanField(default=False, help_text="A simulated run: virtual clock, sandbox connectors.")
    # The virtual "now" of a simulated run; the simulator moves it, runs.clock reads it.
    virtual_now = models.DateTimeField(null=True, blank=True)
    external_ref = models.CharField(max_length=200, blank=True, help_text="The integrator's own id for this run.")
    goal = models.TextField()
    inputs = models.JSONField(default=dict, blank=True)
    # The compiled plan the run follows (a copy of the pinned version's).
    plan = models.JSONField(default=dict, blank=True)
    # jsonb's own 64-bit hash of the plan, computed by the database when the row is written (a plan never changes
    # after the start): a claim returns it instead of the plan, and runs.plan_cache keys the plans it holds by it.
    plan_hash = models.GeneratedField(
        expression=Func(F("plan"), Value(0), function="jsonb_hash_extended", output_field=models.BigIntegerField()),
        output_field=models.BigIntegerField(), db_persist=True,
    )
    # Runtime memory, versioned ({"v": 1, ...}); written only under the lease fence.
    state = models.JSONField(default=dict, blank=True)
    status = FSMField(default=RunStatus.ACTIVE, choices=RunStatus.choices, protected=True)
    # Why the run sleeps: "followup:<task>", "reply:<channel>", "human:<escalation id>"; null when runnable or ended.
    wake_when = models.CharField(max_length=200, null=True, blank=True)
    next_wake_at = models.DateTimeField(null=True, blank=True)
    # Lease (DESIGN §5): always on the database's real clock, in simulation too.
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Set (database clock) when an advance_run task is queued, cleared when one starts (runs.queue): the
    # dispatcher never queues a second task behind one still waiting.
    advance_enqueued_at = models.DateTimeField(null=True, blank=True)
    # The seq of the run's last journal entry: a fence that writes entries takes the next ones in its own
    # statement (runs.journal), so a journal write costs no seq lookup.
    journal_seq = models.PositiveIntegerField(db_default=0, editable=False)
    # Budgets and usage.
    step_budget = models.PositiveIntegerField(default=200)
    steps_used = models.PositiveIntegerField(default=0)
    token_budget = models.PositiveIntegerField(default=500_000)
    tokens_used = models.PositiveIntegerField(default=0)
    cost_budget = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("5"))
    cost_used = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("0"))
    outcome = models.TextField(blank=True)
    # Who started and who cancelled it through the API or the Studio: a person, an API key, or neither (runtime).
    # Mostly empty: indexed only where set (Meta.indexes), so the row's updates write no entry for them.
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    started_by_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                       db_index=False)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    cancelled_by_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                         db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # dispatch_due: sleeping runs whose wake time has come.
            models.Index(
                fields=["next_wake_at"], name="run_next_wake", condition=Q(next_wake_at__isnull=False)
            ),
            models.Index(fields=["organization", "status"], name="run_org_status"),
            # Deleting a person or an API key sets these to NULL: found through an index that holds only the runs
            # they name. Every update of a run that moves an indexed column (its status, its next wake) writes an
            # entry into each index whose condition the row meets, so a column that is mostly NULL costs nothing.
            *[models.Index(fields=[name], name=f"run_{name}", condition=Q(**{f"{name}__isnull": False}))
              for name in ("started_by", "started_by_key", "cancelled_by", "cancelled_by_key")],
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.get_status_display().lower()})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_RUN_STATUSES

    @property
    def offset_key(self) -> int | str:
        """What spreads this run's business-day wakes (runs.policy.run_offset): its id, or for a
        simulation its stable `sim:` reference, so the same case and seed give the same times."""
        if self.sim and self.external_ref.startswith("sim:"):
            return self.external_ref
        return self.pk

    @transition(field=status, source=[RunStatus.WAITING, RunStatus.WAITING_HUMAN, RunStatus.ACTIVE],
                target=RunStatus.ACTIVE)
    def activate(self) -> None:
        pass

    @transition(field=status, source=[RunStatus.ACTIVE, RunStatus.WAITING, RunStatus.WAITING_HUMAN],
                target=RunStatus.WAITING)
    def sleep(self) -> None:
        pass

    @transition(field=status, source=[RunStatus.ACTIVE, RunStatus.WAITING, RunStatus.WAITING_HUMAN],
                target=RunStatus.WAITING_HUMAN)
    def wait_for_human(self) -> None:
        pass

    @transition(field=status, source=OPEN_RUN_STATUSES, target=RunStatus.COMPLETED)
    def complete(self) -> None:
        pass

    @transition(field=status, source=OPEN_RUN_STATUSES, target=RunStatus.FAILED)
    def fail(self) -> None:
        pass

    @transition(field=status, source=OPEN_RUN_STATUSES, target=RunStatus.CANCELLED)
    def cancel(self) -> None:
        pass


class Contact(models.Model):
    """Someone the run may contact. Changes are append-only: old values move to `history`."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="contacts")
    role = models.CharField(max_length=64)
    name = models.CharField(max_length=200, blank=True)
    email = models.EmailField(blank=True)
    phone = models.CharField(max_length=32, blank=True, help_text="E.164")
    slack_user = models.CharField(max_length=64, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    history = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "role"]
        constraints = [models.UniqueConstraint(fields=["run", "role"], name="contact_unique_role")]
        indexes = [models.Index(fields=["phone"], name="contact_phone"),
                   models.Index(fields=["slack_user"], name="contact_slack_user")]

    def __str__(self) -> str:
        return f"{self.role}: {self.name or self.email or self.phone}"


class TaskStatus(models.TextChoices):
    OPEN = "open", "Open"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"


class Task(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tasks")
    key = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    required = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.OPEN)
    # What proved it done: the check that passed and the evidence it passed on.
    done_evidence = models.JSONField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="task_unique_key")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"
