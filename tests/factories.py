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


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"agent-{n}")
    name = factory.Sequence(lambda n: f"Agent {n}")


def api_key_for(organization: Organization, *, role: str = ApiKey.Role.RUNNER) -> str:
    """A fresh plain API key for the organization."""
    _, plain = api_keys.issue_key(organization, name=f"test {role}", role=role)
    return plain
