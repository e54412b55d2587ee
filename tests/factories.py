"""factory-boy factories for every model tests create."""

import factory

from agents import api_keys
from agents.models import Agent, ApiKey, Organization


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Org {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")
    default_timezone = "America/New_York"
    # Shadow organizations of simulations (`*-sim`, `simulation`) are sandboxes, as simulator.sim_org makes them.
    sandbox = factory.LazyAttribute(lambda org: org.slug.endswith("-sim") or org.slug == "simulation")


class AgentFactory(factory.django.DjangoModelFactory):
    """An organization's agent (a new organization unless given); `organization=None` makes a template."""

    class Meta:
        model = Agent
        django_get_or_create = ("organization", "slug")

    organization = factory.SubFactory(OrganizationFactory)
    slug = factory.Sequence(lambda n: f"agent-{n}")
    name = factory.Sequence(lambda n: f"Agent {n}")


def template_agent(slug: str | None = None, **fields) -> Agent:
    """A template: an agent of no organization, readable and copyable by every organization."""
    if slug is not None:
        fields["slug"] = slug
    return AgentFactory(organization=None, **fields)


def api_key_for(organization: Organization, *, role: str = ApiKey.Role.RUNNER) -> str:
    """A fresh plain API key for the organization."""
    _, plain = api_keys.issue_key(organization, name=f"test {role}", role=role)
    return plain


# Agent versions are written only through agents.versions; these build them that way.

AGENT_SOURCE = """\
slug: {slug}
name: {name}
description: Asks a vendor for their W-9.
capabilities: [email]
instructions: Ask the vendor for their W-9 politely.
contacts:
  - role: vendor
tasks:
  - key: w9
    title: Get the W-9
    contact_role: vendor
    done_when:
      type: attachment_received
      content_types: [application/pdf]
followup:
  steps:
    - delay: 0m
      channel: email
    - delay: 2bd
      channel: email
model:
  scripted:
    messages:
      first:
        subject: Your W-9
        body: Hello, could you send your W-9?
      followup:
        body: Just checking in on the W-9.
"""


def agent_source(slug: str, *, name: str = "W-9 collector") -> str:
    """A small valid agent config for `slug`."""
    return AGENT_SOURCE.format(slug=slug, name=name)


def draft_version(agent: Agent | None = None, *, source: str | None = None):
    from agents import versions

    agent = agent or AgentFactory()
    return versions.create_draft(agent, source=source if source is not None else agent_source(agent.slug))


def published_version(agent: Agent | None = None, *, source: str | None = None):
    from agents import versions

    return versions.publish(draft_version(agent, source=source))


# --- Runtime (runs/): a tiny compiled plan, so runtime tests do not depend on YAML templates -------------

TINY_PLAN = {
    "schema": 1,
    "slug": "tiny",
    "name": "Tiny W-9 collector",
    "description": "",
    "capabilities": ["email", "sms"],
    "instructions": "Ask the vendor for their W-9.",
    "inputs": [],
    "contacts": [{"role": "vendor", "required": True, "channels": ["email", "sms"]}],
    "tasks": [
        {"key": "w9", "title": "Get the W-9", "contact_role": "vendor", "required": True,
         "done_when": {"type": "reply_matches", "pattern": "(?i)w-?9"}},
    ],
    "followup": {
        "timezone_source": "contact", "timezone": None, "business_days": [0, 1, 2, 3, 4],
        "business_hours": {"start": "09:00", "end": "17:00"},
        "ladder": [{"step": 0, "channel": "email", "delay_s": 0, "delay_business_days": 0},
                   {"step": 1, "channel": "email", "delay_s": 0, "delay_business_days": 2}],
        "max_attempts": 2, "on_exhausted": "escalate", "on_reply": "pause", "reply_grace_s": 172800,
    },
    "compliance": {"quiet_hours": None, "per_contact_caps": {"per_day": 2, "per_week": 6}, "opt_out_text": {},
                   "forbidden_phrases": [], "allowed_recipients": "run_contacts"},
    "tools": [],
    "model": {"provider": "scripted", "name": None, "temperature": 0.2, "max_steps_per_episode": 6,
              "budgets": {"steps": 50, "tokens": 10_000, "cost_usd": 1.5}, "scripted": None},
    "evals": [],
}


def tiny_plan(**overrides) -> dict:
    """A deep copy of TINY_PLAN with top-level keys replaced."""
    import copy

    return {**copy.deepcopy(TINY_PLAN), **overrides}


def plan_version(plan: dict | None = None, *, agent: Agent | None = None, status: str = "published"):
    """An AgentVersion holding `plan` as its compiled plan (written directly: tests of the runtime only)."""
    from agents.models import AgentVersion

    agent = agent or AgentFactory()
    number = AgentVersion.objects.filter(agent=agent).count() + 1
    return AgentVersion.objects.create(
        agent=agent, number=number, status=status, source="# compiled directly by tests", compiled=plan or tiny_plan(),
        config_hash=f"test-{agent.slug}-{number}",
    )


def deployed_agent(plan: dict | None = None, *, organization: Organization | None = None):
    """An organization with an active deployment of a published version of `plan`: (organization, deployment)."""
    from agents.models import Deployment

    organization = organization or OrganizationFactory()
    version = plan_version(plan, agent=AgentFactory(organization=organization))
    deployment = Deployment.objects.create(organization=organization, agent=version.agent, version=version)
    return organization, deployment


class RunFactory(factory.django.DjangoModelFactory):
    """A run with no episodes; tests add the episodes they need."""

    class Meta:
        model = "runs.Run"

    organization = factory.SubFactory(OrganizationFactory)
    version = factory.LazyAttribute(lambda run: plan_version(agent=AgentFactory(organization=run.organization)))
    plan = factory.LazyAttribute(lambda run: run.version.compiled)
    goal = "Collect the W-9"
    state = factory.LazyFunction(lambda: {"v": 1})


class ContactFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "runs.Contact"

    run = factory.SubFactory(RunFactory)
    role = "vendor"
    name = "Vera Vendor"
    email = factory.Sequence(lambda n: f"vendor{n}@example.com")
    timezone = "America/New_York"


class TaskFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "runs.Task"

    run = factory.SubFactory(RunFactory)
    key = "w9"
    title = "Get the W-9"


class EpisodeFactory(factory.django.DjangoModelFactory):
    """A queued episode; `seq` follows the run's last one."""

    class Meta:
        model = "runs.Episode"

    run = factory.SubFactory(RunFactory)
    seq = factory.LazyAttribute(lambda ep: ep.run.episodes.count() + 1)
    kind = "event"
    dedupe_key = factory.Sequence(lambda n: f"test:{n}")
    payload = factory.LazyFunction(dict)
    due_at = factory.LazyFunction(lambda: _real_now())


class EscalationFactory(factory.django.DjangoModelFactory):
    """An open question on a run, in the run's organization."""

    class Meta:
        model = "runs.Escalation"

    run = factory.SubFactory(RunFactory)
    organization = factory.LazyAttribute(lambda escalation: escalation.run.organization)
    kind = "question"
    prompt = "Which address should the W-9 go to?"


def _real_now():
    from django.utils import timezone

    return timezone.now()


# --- Simulator: scorecards the publish gate reads ------------------------------------------------------------------


def scorecard_for(version, *, passed: bool = True, config_hash: str | None = None, cases: list[dict] | None = None):
    """A stored Scorecard for `version` (default: its current config hash), without simulating anything."""
    from simulator.models import Scorecard

    if cases is None:
        cases = [{"name": "golden-case", "kind": "golden", "passed": passed,
                  "reasons": [] if passed else ["expected escalated=true, got false"], "metrics": {}, "run_id": None}]
    return Scorecard.objects.create(
        version=version, config_hash=version.config_hash if config_hash is None else config_hash, passed=passed,
        cases=cases, metrics={"cases": len(cases), "passed": sum(1 for case in cases if case["passed"])},
    )
