"""Property-based API tests: every operation in /api/schema/, generated inputs, two organizations' builder keys.

Each response must be a non-5xx with a documented status code, content type
and body shape. Examples are derandomized (a fixed seed per operation), so a
run is reproducible and a failure is the code's, not the dice's.
"""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agents.models import ApiKey
from connectors import identities
from runs.models import Escalation, EscalationKind
from simulator import sim_org
from simulator.models import Simulation, SimulationStatus
from tests.factories import ContactFactory, EpisodeFactory, RunFactory, TaskFactory, api_key_for, deployed_agent

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# About a minute for the whole file on a shared two-core machine.
EXAMPLES_PER_OPERATION = 20

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


def _seed_organization(number: int) -> dict:
    """An organization with a deployed agent, an identity, a run with a contact, a task, an episode and an open
    escalation: its builder key and, per path parameter, the value that names its own object."""
    organization, deployment = deployed_agent()
    run = RunFactory(organization=organization, version=deployment.version)
    ContactFactory(run=run)
    TaskFactory(run=run)
    EpisodeFactory(run=run, kind="inbound", payload={"text": "Here it is", "channel": "email"})
    escalation = Escalation.objects.create(organization=organization, run=run, kind=EscalationKind.QUESTION,
                                           prompt="Is the W-9 signed?", options=["yes", "no"])
    identity = identities.create_identity(organization, channel="email", address=f"agent{number}@example.com")
    simulation = Simulation.objects.create(version=deployment.version, organization=sim_org.organization_for(
        organization), status=SimulationStatus.PASSED, results=[])
    return {
        "key": api_key_for(organization, role=ApiKey.Role.BUILDER),
        "ids": {"runs": run.pk, "escalations": escalation.pk, "deployments": deployment.pk, "identities": identity.pk,
                "simulations": simulation.pk},
        "slug": deployment.agent.slug,
        "number": deployment.version.number,
    }


@pytest.fixture
def organizations(db) -> list[dict]:
    return [_seed_organization(0), _seed_organization(1)]


def _aim_at(case, owner: dict) -> None:
    """Point the case's path parameters at `owner`'s objects, so answers for real rows are checked too."""
    collection = case.operation.path.split("/")[3]
    for name in case.path_parameters or {}:
        if name == "id":
            case.path_parameters[name] = owner["ids"][collection]
        elif name in ("slug", "agent_slug"):
            case.path_parameters[name] = owner["slug"]
        elif name == "number":
            case.path_parameters[name] = owner["number"]


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    # The WSGI handler closes the connection around each request; the test's transaction lives on it
    # (django.test.Client disconnects the same receivers).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@schema.parametrize()
# Whose key calls; whether the path names real objects and whose (another organization's must be a 404).
@schema.given(caller=st.sampled_from([0, 1]), target=st.sampled_from([None, 0, 1]))
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_every_generated_request_within_its_schema(case, caller, target, organizations):
    if target is not None:
        _aim_at(case, organizations[target])
    response = case.call_and_validate(headers={"Authorization": f"Api-Key {organizations[caller]['key']}"},
                                      checks=CHECKS)
    owned_elsewhere = target is not None and target != caller and "{id}" in case.operation.path
    if owned_elsewhere:
        assert response.status_code in (400, 404), response.text
