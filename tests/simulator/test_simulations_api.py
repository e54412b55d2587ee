"""`/api/v1/simulations/`: the caller's simulations and each case's timeline, by calendar day; others' are 404."""

from __future__ import annotations

import pytest

from agents.models import ApiKey
from simulator import scorecards
from tests.factories import AgentFactory, OrganizationFactory
from tests.simulator.conftest import collector_draft
from tests.simulator.test_simulate_api import client_for

pytestmark = pytest.mark.django_db

CASE = "replies-with-pdf-after-3-days"


@pytest.fixture
def org():
    return OrganizationFactory(slug="acme", default_timezone="America/Chicago")


@pytest.fixture
def simulation(org):
    version = collector_draft(agent=AgentFactory(organization=org, slug="document-collector"))
    return scorecards.run(version, cases=scorecards.select_cases(version, names=[CASE]), organization=org)


def test_a_case_timeline_is_read_by_calendar_day_in_the_organizations_zone(org, simulation):
    reader = client_for(ApiKey.Role.RUNNER, org)  # reading needs no builder key

    response = reader.get(f"/api/v1/simulations/{simulation.pk}/cases/{CASE}/timeline/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["simulation"], body["case"], body["passed"]) == (simulation.pk, CASE, True)
    days = [row["day"] for row in body["timeline"]]
    assert days == sorted(days) and days[0] == 0 and all(isinstance(day, int) for day in days)
    # The first email goes out Monday 09:00 in the organization's zone: day 0 is that date there.
    assert body["timeline"][0]["local"].startswith("Mon 09:00 CST")
    assert any(row["type"] == "outbound" for row in body["timeline"])


def test_the_list_and_detail_show_the_callers_simulations_with_their_verdicts(org, simulation):
    reader = client_for(ApiKey.Role.BUILDER, org)

    listed = reader.get("/api/v1/simulations/").json()
    detail = reader.get(f"/api/v1/simulations/{simulation.pk}/").json()

    assert [item["id"] for item in listed["results"]] == [simulation.pk]
    assert detail["agent"] == "document-collector" and detail["cases"][0]["name"] == CASE
    assert "timeline" not in detail["cases"][0]


def test_another_organizations_simulation_is_a_404(simulation):
    stranger = client_for(ApiKey.Role.BUILDER, OrganizationFactory(slug="other"))

    assert stranger.get(f"/api/v1/simulations/{simulation.pk}/").status_code == 404
    assert stranger.get(f"/api/v1/simulations/{simulation.pk}/cases/{CASE}/timeline/").status_code == 404
    assert stranger.get("/api/v1/simulations/").json()["results"] == []


def test_an_unknown_case_is_a_404_naming_the_cases(org, simulation):
    response = client_for(ApiKey.Role.BUILDER, org).get(f"/api/v1/simulations/{simulation.pk}/cases/nope/timeline/")

    assert response.status_code == 404 and CASE in response.json()["detail"]
