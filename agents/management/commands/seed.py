"""`python manage.py seed`: template agents, the demo organization, and a fresh builder API key.

Each template (fixtures/agents/*.yaml) is stored as a version of a template
agent (no organization), simulated over its eval cases when its config has no
scorecard yet, and published through the gate, like a version published from
the Studio. The demo organization then gets its own copy of each published
template, simulated in its `demo-sim` shadow, published through the gate and
deployed: organizations deploy only their own agents. Safe to run again:
templates, copies, the organization, its identities and its deployments are
matched, not duplicated. Only the API key is new each run, because keys are
stored hashed and can be shown only when issued.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from agents import api_keys, versions
from agents.models import AgentVersion, ApiKey, Deployment, Organization, VersionStatus
from connectors import identities
from connectors.models import Identity
from simulator import gate, scorecards

DEMO_SLUG = "demo"
DEMO_TIMEZONE = "America/New_York"
# Sandbox identities: sends through them are stored, never delivered.
DEMO_IDENTITIES = [
    ("email", "demo@sandbox.lucia.localhost", "Lucia demo"),
    ("sms", "+15555550100", "Lucia demo SMS"),
    ("slack", "TDEMO", "Lucia demo workspace"),
    ("voice", "+15555550101", "Lucia demo line"),
]


def template_paths() -> list[Path]:
    return sorted((Path(settings.BASE_DIR) / "fixtures" / "agents").glob("*.yaml"))


class Command(BaseCommand):
    help = "Load the template agents, set up the demo organization, and print a new builder API key for it."

    def handle(self, *args, **options) -> None:
        organization, created = Organization.objects.get_or_create(
            slug=DEMO_SLUG, defaults={"name": "Demo", "default_timezone": DEMO_TIMEZONE, "sandbox": True}
        )
        self.stdout.write(f"Organization {organization.slug}: {'created' if created else 'exists'}")
        self._identities(organization)

        self.stdout.write("Template agents:")
        loaded = [self._load(path, organization) for path in template_paths()]
        if not loaded:
            self.stdout.write(self.style.WARNING("  none found in fixtures/agents/"))

        _, plain = api_keys.issue_key(
            organization, name=f"seed {timezone.now():%Y-%m-%d %H:%M:%S}", role=ApiKey.Role.BUILDER
        )
        self.stdout.write(f"Builder API key for {organization.slug} (shown once; only its hash is stored):")
        self.stdout.write(f"  {plain}")

        self._summary(loaded, organization)

    def _identities(self, organization: Organization) -> None:
        for channel, address, display_name in DEMO_IDENTITIES:
            if Identity.objects.filter(channel=channel, address=address, active=True).exists():
                continue
            identities.create_identity(
                organization, channel=channel, address=address, display_name=display_name, sandbox=True
            )
            self.stdout.write(f"  identity {channel} {address}: created (sandbox)")

    def _load(self, path: Path, organization: Organization) -> AgentVersion:
        """The template's version from `path`, and when it is published, the demo organization's deployed copy."""
        refusals: list[str] = []
        template = versions.load_template(path, publisher=lambda draft: self._publish(draft, refusals=refusals))
        self._report(template, path=path, refusals=refusals)
        if template.status != VersionStatus.PUBLISHED:
            return template
        refusals = []
        copy = versions.follow_template(
            template, organization=organization,
            publisher=lambda draft: self._publish(draft, refusals=refusals, organization=organization),
        )
        self._report(copy, path=path, refusals=refusals)
        if copy.status == VersionStatus.PUBLISHED:
            self._deploy(organization, copy)
        return copy

    def _report(self, version: AgentVersion, *, path: Path, refusals: list[str]) -> None:
        owner = version.agent.organization.slug if version.agent.organization else "template"
        label = f"  {owner}/{version.agent.slug} v{version.number} ({version.status}) {version.agent.name!r}"
        if version.is_valid:
            self.stdout.write(self.style.SUCCESS(f"{label}: valid") + f"  [{path.name}]")
        else:
            self.stdout.write(self.style.ERROR(f"{label}: INVALID, {len(version.validation_errors)} error(s)"))
            for error in version.validation_errors:
                self.stdout.write(f"      {error['path']}: {error['message']} (hint: {error['hint']})")
        for reason in refusals:
            self.stdout.write(self.style.ERROR(f"      publish refused: {reason}"))

    def _publish(
        self, draft: AgentVersion, *, refusals: list[str], organization: Organization | None = None
    ) -> AgentVersion:
        """Simulate the draft's eval cases unless its config already has a scorecard, then ask the gate.

        A refusal (a failing scorecard) leaves the template as a draft and is reported.
        """
        try:
            if scorecards.latest(draft) is None:
                owner = organization.slug if organization else "template"
                self.stdout.write(f"  {owner}/{draft.agent.slug} v{draft.number}: simulating its eval cases…")
                card = scorecards.score(draft, organization=organization)
                self.stdout.write(f"    scorecard #{card.pk}: {'passed' if card.passed else 'FAILED'}")
            return gate.publish(draft)
        except (gate.PublishRefused, scorecards.SimulationError) as refused:
            refusals.append(getattr(refused, "reason", str(refused)))
            return draft

    def _deploy(self, organization: Organization, version: AgentVersion) -> None:
        active = Deployment.objects.filter(organization=organization, agent_id=version.agent_id, active=True).first()
        # Keep a newer version ops deployed from the Studio; only move the demo forward.
        if active is None or active.version.number < version.number:
            versions.deploy(organization, version)

    def _summary(self, loaded: list[AgentVersion], organization: Organization) -> None:
        self.stdout.write("")
        self.stdout.write(f"{'agent':<28} {'version':<8} {'status':<10} {'config':<8} deployed to {organization.slug}")
        for version in loaded:
            deployment = (
                Deployment.objects.filter(organization=organization, agent_id=version.agent_id, active=True)
                .select_related("version")
                .first()
            )
            deployed = f"v{deployment.version.number}" if deployment else "-"
            config = "valid" if version.is_valid else "INVALID"
            number = f"v{version.number}"
            self.stdout.write(f"{version.agent.slug:<28} {number:<8} {version.status:<10} {config:<8} {deployed}")
