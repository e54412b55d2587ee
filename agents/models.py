from django.conf import settings
from django.db import models
from django.db.models import Q
from django_fsm import FSMField, FSMModelMixin, transition


class Organization(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    default_timezone = models.CharField(max_length=64, default="UTC")
    # Simulations' shadow organizations and the demo playground: every send is only stored. Only these
    # may hold sandbox identities (connectors.identities), so a customer's run never reaches the sandbox.
    sandbox = models.BooleanField(
        default=False, help_text="Sends are only stored (simulations, the demo); only these hold sandbox identities."
    )
    # Studio users who work for this organization; staff who are not superusers see only their organizations.
    staff = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="staff_organizations",
        help_text="Studio users who see this organization (superusers see every organization).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [
            # Staff without it cannot pick an organization with the API's X-Lucia-Organization header.
            ("act_as_organization", "Can act for any organization in the API and Studio"),
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    class Role(models.TextChoices):
        RUNNER = "runner", "Runner (runs, events, escalations)"
        BUILDER = "builder", "Builder (also agents and versions)"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.RUNNER)
    # The first characters of the key, shown so a person can tell keys apart.
    prefix = models.CharField(max_length=16, db_index=True)
    hashed_key = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["organization", "name"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_builder(self) -> bool:
        return self.role == self.Role.BUILDER


class Agent(models.Model):
    """An organization's agent, or a template (no organization) that every organization may copy."""

    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.PROTECT, related_name="agents",
        help_text="The owner; empty for a template, which is read-only outside fixtures/agents/.",
    )
    slug = models.SlugField(max_length=80)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug", "organization"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="agent_unique_slug_per_org"),
            # NULLs are distinct in the constraint above, so templates need their own.
            models.UniqueConstraint(
                fields=["slug"], condition=Q(organization__isnull=True), name="agent_unique_template_slug"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_template(self) -> bool:
        return self.organization_id is None


class VersionStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    PUBLISHED = "published", "Published"
    RETIRED = "retired", "Retired"


class AgentVersion(FSMModelMixin, models.Model):
    """One numbered config of an agent. Published versions are read-only (here and by a trigger)."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    status = FSMField(default=VersionStatus.DRAFT, choices=VersionStatus.choices, protected=True)
    source = models.TextField(help_text="The agent's YAML config, as written.")
    compiled = models.JSONField(null=True, blank=True, help_text="Normalized plan; null while the source is invalid.")
    config_hash = models.CharField(max_length=64, blank=True)
    validation_errors = models.JSONField(default=list, blank=True)
    # The version whose source this one started from (the Studio diffs a draft against it); None for a first one.
    based_on = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The version this one started from.",
    )
    # A snapshot of the scorecard that let this version through the publish gate.
    gate_scorecard = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="agentversion_unique_number"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug} v{self.number} ({self.status})"

    @property
    def is_valid(self) -> bool:
        return self.compiled is not None and not self.validation_errors

    @property
    def is_editable(self) -> bool:
        return self.status == VersionStatus.DRAFT

    @transition(field=status, source=VersionStatus.DRAFT, target=VersionStatus.PUBLISHED)
    def mark_published(self) -> None:
        pass

    @transition(field=status, source=VersionStatus.PUBLISHED, target=VersionStatus.RETIRED)
    def mark_retired(self) -> None:
        pass


class Deployment(models.Model):
    """Which published version of an agent an organization runs."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="deployments")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="deployments")
    version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="deployments")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["organization", "agent"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "agent"], condition=Q(active=True), name="deployment_one_active_per_agent"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.organization} → {self.version}"
