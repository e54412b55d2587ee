"""The chaos run's world: two organizations, each with an SMS identity on the Twilio fake and a sandbox
mailbox, the fast-ladder agent deployed to both, and runs started a few at a time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from agents import versions
from agents.models import Deployment, Organization
from chaos import provider
from connectors import identities
from runs import starts
from runs.models import Run

AGENT_PATH = Path(__file__).resolve().parent / "agent.yaml"
ORGANIZATIONS = ("chaos-north", "chaos-south")
OUR_NUMBERS = ("+15005550006", "+15005550007")  # one active identity per address


def prepare(twilio: provider.ChaosTwilio, *, agent_path: Path = AGENT_PATH) -> list[Deployment]:
    """Create the organizations, their identities and deployments of the agent; one deployment each."""
    template = versions.load_template(agent_path)
    deployments = []
    for slug, number in zip(ORGANIZATIONS, OUR_NUMBERS, strict=True):
        # sandbox: it may hold the sandbox email identity below; its SMS go to the Twilio fake.
        organization = Organization.objects.create(name=slug.replace("-", " ").title(), slug=slug,
                                                   default_timezone="UTC", sandbox=True)
        identities.create_identity(
            organization, channel="sms", address=number, display_name=organization.name,
            secret_values={"account_sid": provider.ACCOUNT_SID, "auth_token": provider.AUTH_TOKEN,
                           "api_base_url": twilio.url},
        )
        identities.create_identity(organization, channel="email", address=f"ap@{slug}.example",
                                   display_name=organization.name, sandbox=True)
        version = versions.follow_template(template, organization=organization)  # the organization's own copy
        deployments.append(versions.deploy(organization, version))
    return deployments


def shorter_agent(rungs: int, *, into: Path) -> Path:
    """The agent with only the first `rungs` steps of its ladder, written into `into`: a run settles sooner.

    Settling waits for every run to climb its whole ladder, a rung at a time, so
    the ladder's length, not the number of runs, bounds a small run's duration.
    """
    config = yaml.safe_load(AGENT_PATH.read_text())
    steps = config["followup"]["steps"]
    if not 1 <= rungs <= len(steps):
        raise ValueError(f"the agent's ladder has {len(steps)} rungs; choose 1 to {len(steps)}")
    config["followup"]["steps"] = steps[:rungs]
    config["followup"]["max_attempts"] = rungs
    path = into / "agent.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def start(deployment: Deployment, *, index: int) -> Run:
    """Start run number `index`: its own vendor, phone number and mailbox."""
    return starts.start_run(
        deployment.organization, deployment=deployment, goal=f"Collect the W-9 of vendor {index}",
        contacts=[{"role": "vendor", "name": f"Dana Vendor{index}", "email": f"vendor{index}@chaos.example",
                   "phone": phone_of(index), "timezone": noon_timezone()}],
    )


def phone_of(index: int) -> str:
    return f"+1555{6000000 + index:07d}"


def noon_timezone(now: datetime | None = None) -> str:
    """A fixed-offset zone where it is about noon now: the send window (00:00-23:59) never closes mid-run."""
    hour = (now or datetime.now(UTC)).hour
    offset = max(-12, min(12, 12 - hour))  # local = UTC + offset; Etc/GMT signs are inverted
    return "Etc/GMT" if offset == 0 else f"Etc/GMT{-offset:+d}"
