"""Two organizations with a row of every Studio model each, and Studio users in roles: for role and scope tests.

Everything of Globex carries the word "globex", so a page that leaks it to an Acme user shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from agents import api_keys, roles, versions
from agents.models import Organization
from connectors.models import DeliveryEvent, Identity, InboundMessage, Suppression, SuppressionLift
from runs.models import EscalationRoute, JournalEntry, OutboxMessage
from simulator.models import EvalCase, Simulation
from tests.factories import (
    AgentFactory,
    ContactFactory,
    EpisodeFactory,
    EscalationFactory,
    OrganizationFactory,
    RunFactory,
    published_version,
    scorecard_for,
)

PASSWORD = "studio-tests-password-0123"


def studio_user(username: str, *, role: str | None = None, organizations=(), superuser: bool = False):
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True, is_superuser=superuser)
    if role:
        roles.ensure_roles()
        user.groups.add(Group.objects.get(name=role))
    for organization in organizations:
        organization.staff.add(user)
    return user


@dataclass
class World:
    acme: Organization
    globex: Organization
    # "app_label.model_name" → (Acme's row, Globex's row)
    rows: dict[str, tuple] = field(default_factory=dict)


def build_world() -> World:
    acme, globex = OrganizationFactory(slug="acme", name="Acme Corp"), OrganizationFactory(slug="globex",
                                                                                             name="Globex Corp")
    world = World(acme=acme, globex=globex)
    for organization in (acme, globex):
        slug = organization.slug
        api_key, _ = api_keys.issue_key(organization, name=f"{slug} key")
        version = published_version(AgentFactory(organization=organization, slug=f"{slug}-w9"))
        deployment = versions.deploy(organization, version)
        run = RunFactory(organization=organization, version=version, goal=f"Collect the {slug} W-9")
        ContactFactory(run=run, email=f"vera@{slug}.example")
        episode = EpisodeFactory(run=run)
        journal = JournalEntry.objects.create(run=run, seq=1, kind="note", data={"text": f"{slug} note"},
                                              at=timezone.now())
        escalation = EscalationFactory(run=run, prompt=f"Which {slug} address?")
        send = OutboxMessage.objects.create(
            idem_key=f"{slug}-send".ljust(64, "0"), run=run, episode=episode, tool="send_email", channel="email",
            recipient=f"vera@{slug}.example", status="sent", provider_message_id=f"<{slug}-1@mail>",
            created_at=timezone.now())
        rows = {
            "agents.organization": organization, "agents.apikey": api_key, "agents.agent": version.agent,
            "agents.agentversion": version, "agents.deployment": deployment,
            "connectors.identity": Identity.objects.create(organization=organization, channel="email",
                                                           address=f"ops@{slug}.example"),
            "connectors.suppression": Suppression.objects.create(organization=organization, channel="email",
                                                                 address=f"stop@{slug}.example", reason="stop"),
            "connectors.inboundmessage": InboundMessage.objects.create(
                organization=organization, channel="email", provider_id=f"{slug}-1",
                from_address=f"stranger@{slug}.example", text=f"hello from {slug}"),
            "connectors.suppressionlift": SuppressionLift.objects.create(
                organization=organization, channel="sms", address=f"+1555{len(slug)}", reason="stop",
                suppressed_at=timezone.now(), note=f"{slug} asked again"),
            "connectors.deliveryevent": DeliveryEvent.objects.create(
                channel="email", provider_message_id=send.provider_message_id, idem_key=send.idem_key,
                event_type="delivered"),
            "runs.outboxmessage": send,
            "runs.run": run, "runs.episode": episode, "runs.journalentry": journal, "runs.escalation": escalation,
            "runs.escalationroute": EscalationRoute.objects.create(organization=organization,
                                                                  email_to=f"ops@{slug}.example"),
            "simulator.simulation": Simulation.objects.create(version=version, organization=organization),
            "simulator.scorecard": scorecard_for(version),
            "simulator.evalcase": EvalCase.objects.create(agent=version.agent, name=f"{slug}-case", spec={}),
        }
        for label, row in rows.items():
            world.rows[label] = (*world.rows.get(label, ()), row)
    return world
