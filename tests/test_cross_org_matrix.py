"""Another organization's key never reaches an organization's rows, on any `/api/v1/` route.

The matrix is generated from the URLconf, not listed by hand: every route
under `/api/v1/` with an id or slug in its path, called with every method its
view allows, answers 404 to a builder key of another organization (and
changes nothing); every list route shows none of the victim's rows. A new
route whose view forgets to scope by organization fails here; a new kind of
id in a path fails too, until the victim below gets a row of that kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from agents import versions
from agents.models import AgentVersion, ApiKey, Deployment
from connectors import identities
from connectors.models import Identity
from runs import starts
from runs.models import Escalation, EscalationRoute, Run
from simulator import sim_org
from simulator.models import Simulation
from tests.factories import (
    AgentFactory,
    EscalationFactory,
    OrganizationFactory,
    agent_source,
    api_key_for,
    draft_version,
    published_version,
)

pytestmark = pytest.mark.django_db

API_PREFIX = "api/v1/"
# Appears in every victim row a list could show (slugs, goals, prompts, addresses).
MARK = "victimmark"
# One body for every write: each view reads the fields it knows, so a lookup is never hidden behind a 400.
BODY = {
    "source": agent_source(f"{MARK}-agent"), "answer": "yes", "outcome": "sent", "reason": "attack",
    "dedupe_key": "attack-1", "text": "attack", "seed": 0, "display_name": "attack", "active": False,
    "channel": "email", "address": f"{MARK}@victim.example",
}


@dataclass(frozen=True)
class Route:
    name: str
    groups: tuple[str, ...]
    methods: tuple[str, ...]
    actions: dict

    @property
    def is_list(self) -> bool:
        return not self.groups and self.actions.get("get") == "list"


def api_routes() -> list[Route]:
    """Every named `/api/v1/` route with its path groups (the format suffix aside) and allowed methods."""
    found: dict[tuple[str, tuple[str, ...]], Route] = {}
    for prefix, pattern in _walk(get_resolver().url_patterns):
        if not prefix.startswith(API_PREFIX) or not pattern.name:
            continue
        actions = getattr(pattern.callback, "actions", None) or {}
        groups = tuple(name for name in pattern.pattern.regex.groupindex if name != "format")
        # What the view allows: its router actions, less any method it turns away (http_method_names).
        allowed = getattr(getattr(pattern.callback, "cls", None), "http_method_names", list(actions))
        methods = tuple(sorted(method for method in actions if method in allowed))
        found[(pattern.name, groups)] = Route(pattern.name, groups, methods, actions)
    return sorted(found.values(), key=lambda route: route.name)


def _walk(patterns, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern).lstrip("^"), pattern


ROUTES = api_routes()
DETAIL_ROUTES = [route for route in ROUTES if route.groups]
LIST_ROUTES = [route for route in ROUTES if route.is_list]


def client_for(organization) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization, role=ApiKey.Role.BUILDER)}")
    return client


@pytest.fixture
def victim():
    """One organization with a row of every kind an API path can name."""
    organization = OrganizationFactory(slug=f"{MARK}-org", name=f"{MARK} org")
    agent = AgentFactory(organization=organization, slug=f"{MARK}-agent", name=f"{MARK} agent")
    published = published_version(agent, source=agent_source(agent.slug))
    draft = draft_version(agent)
    deployment = versions.deploy(organization, published)
    identity = identities.create_identity(organization, channel="email", address=f"{MARK}@victim.example")
    run = starts.start_run(organization, deployment=deployment, goal=f"{MARK} goal", contacts=[
        {"role": "vendor", "name": f"{MARK} vendor", "email": f"vendor@{MARK}.example"}])
    escalation = EscalationFactory(run=run, prompt=f"{MARK} question")
    EscalationRoute.objects.create(organization=organization, email_identity=identity, email_to=f"ops@{MARK}.example")
    simulation = Simulation.objects.create(version=draft, organization=sim_org.organization_for(organization),
                                           status="passed", results=[{"name": f"{MARK}-case", "passed": True,
                                                                      "reasons": [], "timeline": []}])
    # Path values by route basename (the part of the route name before the first "-" action).
    values = {
        "agent": {"slug": agent.slug},
        "agent-version": {"agent_slug": agent.slug, "number": draft.number},
        "template": {"slug": agent.slug},
        "deployment": {"pk": deployment.pk},
        "identity": {"pk": identity.pk},
        "run": {"pk": run.pk},
        "escalation": {"pk": escalation.pk},
        "simulation": {"pk": simulation.pk, "case_name": f"{MARK}-case"},
    }
    return organization, values


@pytest.fixture
def attacker():
    organization = OrganizationFactory(slug="attacker")
    # Its own agent of another slug, so a lookup that ignores the slug would find something.
    published_version(AgentFactory(organization=organization, slug="attacker-agent"))
    return client_for(organization)


def path_values(route: Route, values: dict) -> dict:
    for basename in sorted(values, key=len, reverse=True):
        if route.name.startswith(basename + "-"):
            kwargs = values[basename]
            missing = set(route.groups) - set(kwargs)
            assert not missing, f"{route.name}: no victim value for {sorted(missing)}; extend the victim fixture"
            return {name: kwargs[name] for name in route.groups}
    raise AssertionError(f"{route.name} names an object the victim fixture has no row of; add one")


def snapshot() -> dict:
    """Everything a foreign write could change."""
    return {
        "versions": list(AgentVersion.objects.order_by("id").values_list("id", "status", "source")),
        "deployments": list(Deployment.objects.order_by("id").values_list("id", "active", "version_id")),
        "identities": list(Identity.objects.order_by("id").values_list("id", "active", "display_name")),
        "runs": list(Run.objects.order_by("id").values_list("id", "status")),
        "episodes": sorted(Run.objects.values_list("episodes__id", flat=True), key=lambda pk: pk or 0),
        "escalations": list(Escalation.objects.order_by("id").values_list("id", "status", "answer")),
    }


def test_the_matrix_covers_the_api():
    # A routing change that hid every route would make the matrix pass vacuously.
    names = {route.name for route in DETAIL_ROUTES}
    assert {"agent-detail", "agent-version-publish", "run-cancel", "escalation-answer", "identity-detail",
            "deployment-detail", "template-detail"} <= names
    assert {"agent-list", "run-list", "escalation-list", "identity-list", "deployment-list"} <= {
        route.name for route in LIST_ROUTES}


@pytest.mark.parametrize("route", DETAIL_ROUTES, ids=lambda route: route.name)
def test_another_organizations_key_gets_404_on_every_method_and_changes_nothing(route, victim, attacker):
    _, values = victim
    kwargs = path_values(route, values)
    before = snapshot()

    for fmt in (None, "json"):
        url = reverse(route.name, kwargs=kwargs | ({"format": fmt} if fmt else {}))
        for method in route.methods:
            response = getattr(attacker, method)(url, BODY, format="json") if method != "get" else attacker.get(url)
            assert response.status_code == 404, (method.upper(), url, response.status_code, response.content[:300])
            assert MARK not in response.content.decode(), (method.upper(), url)

    assert snapshot() == before


@pytest.mark.parametrize("route", [r for r in DETAIL_ROUTES if "get" in r.methods], ids=lambda route: route.name)
def test_options_does_not_tell_a_foreign_row_from_a_missing_one(route, victim, attacker):
    _, values = victim
    kwargs = path_values(route, values)
    missing = {name: ("999999999" if name in ("pk", "number") else "no-such-slug") for name in kwargs}
    foreign = attacker.options(reverse(route.name, kwargs=kwargs))
    absent = attacker.options(reverse(route.name, kwargs=missing))
    assert foreign.status_code == absent.status_code
    assert MARK not in foreign.content.decode()


@pytest.mark.parametrize("route", DETAIL_ROUTES, ids=lambda route: route.name)
def test_the_owner_reaches_the_same_rows(route, victim):
    """The control: the ids above are right, so the 404s come from scoping, not from a wrong path."""
    organization, values = victim
    if route.name.startswith("template-") or "get" not in route.methods:
        pytest.skip("templates are shared, not owned; the 404 matrix covers non-GET routes")
    response = client_for(organization).get(reverse(route.name, kwargs=path_values(route, values)))
    assert response.status_code == 200, response.content[:300]


@pytest.mark.parametrize("route", LIST_ROUTES, ids=lambda route: route.name)
def test_no_list_shows_another_organizations_rows(route, victim, attacker):
    organization, _ = victim
    url = reverse(route.name)
    for params in ({}, {"agent": f"{MARK}-agent"}, {"limit": 500}):
        response = attacker.get(url, params)
        assert response.status_code == 200, response.content[:300]
        assert MARK not in response.content.decode(), (url, params)
    if not route.name.startswith("template-"):
        # The control: the owner's own list does show the row, so the marker is where a leak would put it.
        assert MARK in client_for(organization).get(url, {"limit": 500}).content.decode(), url
