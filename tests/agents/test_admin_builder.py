"""The agent builder in the Studio: editor lines, validate, diff, background simulate, scorecards, publish, deploy."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from agents import versions
from agents.models import AgentVersion, Deployment, VersionStatus
from simulator import scorecards
from simulator.models import Scorecard, Simulation, SimulationStatus
from tests.agents.builder_helpers import (
    BUILDER_PERMISSIONS,
    VIEWER_PERMISSIONS,
    run_queued_tasks,
    source_with_case,
    staff_user,
)
from tests.factories import AgentFactory, OrganizationFactory, agent_source, draft_version, published_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def organization():
    return OrganizationFactory(slug="acme")


@pytest.fixture
def builder(client, organization):
    user = staff_user("bea", permissions=BUILDER_PERMISSIONS, organizations=[organization])
    client.force_login(user)
    return client


def url(name: str, version: AgentVersion, *args) -> str:
    return reverse(f"admin:agents_agentversion_{name}", args=[version.pk, *args])


def draft_with_case(organization, *, passing: bool = True) -> AgentVersion:
    agent = AgentFactory(organization=organization, slug="w9")
    return versions.create_draft(agent, source=source_with_case("w9", passing=passing))


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


# --- editor and validation -------------------------------------------------------------------------------------


def test_config_errors_are_listed_with_the_line_they_are_about(builder, organization):
    draft = draft_version(AgentFactory(organization=organization, slug="w9"))
    broken = agent_source("w9").replace("delay: 2bd\n      channel: email", "delay: 2bd\n      channel: fax")

    response = builder.post(url("change", draft), {"source": broken, "_validate": "Save and validate"}, follow=True)

    html = response.content.decode()
    fax_line = broken.splitlines().index("      channel: fax") + 1
    assert f'data-error-line="{fax_line}"' in html
    assert f'data-goto-line="{fax_line}"' in html
    assert "<code>followup.steps[1].channel</code>" in html
    assert "use one of:" in html  # the hint
    assert 'class="lucia-gutter"' in html and f'<span data-line="{fax_line}">{fax_line}</span>' in html
    assert any("config error(s)" in message for message in messages_of(response))


def test_save_and_validate_says_a_valid_draft_is_valid(builder, organization):
    draft = draft_version(AgentFactory(organization=organization, slug="w9"), source="slug: w9\n")

    response = builder.post(url("change", draft), {"source": agent_source("w9"), "_validate": "1"}, follow=True)

    assert response.redirect_chain[-1][0] == url("change", draft)
    assert any("its config is valid" in message for message in messages_of(response))
    assert 'id="lucia-config-ok"' in response.content.decode()
    assert AgentVersion.objects.get(pk=draft.pk).is_valid


# --- diff ----------------------------------------------------------------------------------------------------


def test_a_draft_is_diffed_against_the_version_it_came_from(builder, organization):
    first = published_version(AgentFactory(organization=organization, slug="w9"))
    draft = versions.edit(first.agent, source=agent_source("w9", name="Renamed collector"))
    assert draft.based_on_id == first.pk

    side = builder.get(url("diff", draft)).content.decode()
    unified = builder.get(url("diff", draft), {"view": "unified"}).content.decode()
    page = builder.get(url("change", draft)).content.decode()

    assert 'id="lucia-diff-link"' in page and "Changes since v1" in page
    assert '<span class="diff_chg">W-9</span>' in side and '<span class="diff_chg">Renamed</span>' in side
    assert '<span class="lucia-diff-del">-name: W-9 collector</span>' in unified
    assert '<span class="lucia-diff-add">+name: Renamed collector</span>' in unified


def test_a_diff_against_another_organizations_version_is_not_found(builder, organization):
    mine = draft_version(AgentFactory(organization=organization, slug="w9"))
    theirs = draft_version()

    assert builder.get(url("diff", mine), {"against": theirs.pk}).status_code == 404
    assert builder.get(url("diff", theirs)).status_code == 404


# --- simulate in the background ---------------------------------------------------------------------------------


def test_simulate_queues_a_task_and_its_progress_advances_when_the_task_runs(builder, organization):
    from django_q.models import OrmQ

    draft = draft_with_case(organization)

    response = builder.post(url("simulate", draft), follow=True)

    simulation = Simulation.objects.get(version=draft)
    assert (simulation.status, simulation.cases_done, simulation.cases_total) == (SimulationStatus.QUEUED, 0, 1)
    assert [row.task["func"] for row in OrmQ.objects.all()] == ["simulator.tasks.score_requested"]
    assert not Scorecard.objects.exists()  # the request only queued it
    assert any(f"Simulation #{simulation.pk}" in message and "queued" in message for message in messages_of(response))
    html = response.content.decode()
    assert 'id="lucia-simulation"' in html and 'data-active="true"' in html
    assert 'id="lucia-simulate"' not in html  # no second simulate while this one is under way
    progress = url("progress", draft, simulation.pk)
    assert builder.get(progress).json() | {"status": "queued", "cases_done": 0, "active": True} \
        == builder.get(progress).json()

    assert run_queued_tasks() == [True]

    after = builder.get(progress).json()
    assert (after["status"], after["cases_done"], after["cases_total"], after["active"]) == ("passed", 1, 1, False)
    card = Scorecard.objects.get(simulation_id=simulation.pk)
    assert after["scorecard"] == card.pk and card.passed and card.config_hash == draft.config_hash


def test_progress_is_written_as_each_case_starts(builder, organization, monkeypatch):
    from simulator import engine

    agent = AgentFactory(organization=organization, slug="w9")
    two_cases = source_with_case("w9") + source_with_case("w9").split("evals:\n")[1].replace(
        "sends-the-pdf-next-day", "second-case")
    draft = versions.create_draft(agent, source=two_cases)
    seen, real_run_case = [], engine.run_case

    def observed(version, case, **kwargs):
        row = Simulation.objects.get(version=version)
        seen.append((row.cases_done, row.cases_total, row.current_case))
        return real_run_case(version, case, **kwargs)

    monkeypatch.setattr(engine, "run_case", observed)
    builder.post(url("simulate", draft))
    run_queued_tasks()

    assert seen == [(0, 2, "sends-the-pdf-next-day"), (1, 2, "second-case")]
    assert Simulation.objects.get(version=draft).cases_done == 2


def test_a_second_simulate_is_refused_while_one_waits_and_allowed_once_it_stalled(builder, organization, settings):
    draft = draft_with_case(organization)
    builder.post(url("simulate", draft))

    again = builder.post(url("simulate", draft), follow=True)

    assert Simulation.objects.filter(version=draft).count() == 1
    assert any("still waiting for a worker" in message for message in messages_of(again))

    # The worker took it and was killed past django-q2's timeout: the row stays `running`, and counts as stalled.
    Simulation.objects.filter(version=draft).update(
        status=SimulationStatus.RUNNING,
        started_at=timezone.now() - timedelta(seconds=settings.Q_CLUSTER["timeout"] + 1),
    )
    page = builder.get(url("change", draft)).content.decode()
    assert "stopped — no result within the worker's time limit" in page
    builder.post(url("simulate", draft))
    assert Simulation.objects.filter(version=draft).count() == 2


def test_a_task_delivered_twice_runs_the_simulation_once(organization):
    draft = draft_with_case(organization)
    simulation = scorecards.request(draft, organization=organization)

    assert scorecards.score_requested(simulation.pk) is True
    assert scorecards.score_requested(simulation.pk) is False
    assert Scorecard.objects.filter(version=draft).count() == 1


def test_a_draft_edited_into_errors_while_queued_ends_with_the_reason(builder, organization):
    draft = draft_with_case(organization)
    builder.post(url("simulate", draft))
    versions.update_draft(draft, source="slug: w9\n")

    run_queued_tasks()

    simulation = Simulation.objects.get(version=draft)
    assert simulation.status == SimulationStatus.ERROR
    assert "has config errors" in simulation.error
    assert builder.get(url("progress", draft, simulation.pk)).json()["active"] is False
    assert not Scorecard.objects.exists()


def test_an_invalid_draft_offers_no_simulate_and_refuses_one(builder, organization):
    draft = draft_version(AgentFactory(organization=organization, slug="w9"), source="slug: w9\n")

    page = builder.get(url("change", draft)).content.decode()
    response = builder.post(url("simulate", draft), follow=True)

    assert 'id="lucia-simulate"' not in page and "Fix the config errors below to simulate." in page
    assert any("has config errors" in message for message in messages_of(response))
    assert not Simulation.objects.exists()


# --- scorecards ---------------------------------------------------------------------------------------------


def test_the_scorecard_shows_each_case_each_expectation_and_the_timeline(builder, organization):
    draft = draft_with_case(organization, passing=False)
    builder.post(url("simulate", draft))
    run_queued_tasks()
    card = Scorecard.objects.get(version=draft)

    for page in (builder.get(url("change", draft)), builder.get(reverse("admin:simulator_scorecard_change",
                                                                           args=[card.pk]))):
        html = page.content.decode()
        assert page.status_code == 200
        assert 'data-case="sends-the-pdf-next-day"' in html and "FAILED" in html
        assert 'data-expectation="tasks_done"' in html and 'data-expectation="max_messages"' in html
        assert "message(s) sent, expected at most 0" in html
        assert '<details data-timeline="sends-the-pdf-next-day">' in html
        assert "Here it is." in html  # the persona's reply, from the case's timeline


# --- publish ------------------------------------------------------------------------------------------------


def test_publish_asks_first_and_the_gate_refuses_a_failing_scorecard(builder, organization):
    draft = draft_with_case(organization, passing=False)
    builder.post(url("simulate", draft))
    run_queued_tasks()

    confirm = builder.get(url("publish", draft)).content.decode()
    response = builder.post(url("publish", draft), follow=True)

    assert 'id="lucia-publish-blocked"' in confirm and "failed" in confirm
    assert 'id="lucia-confirm-publish"' not in confirm
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert any("Not published" in message and "sends-the-pdf-next-day" in message
               for message in messages_of(response))


def test_publish_after_a_passing_simulation(builder, organization):
    draft = draft_with_case(organization)
    builder.post(url("simulate", draft))
    run_queued_tasks()

    confirm = builder.get(url("publish", draft)).content.decode()
    page = builder.post(url("publish", draft), follow=True)

    assert 'id="lucia-confirm-publish"' in confirm
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED
    assert any(message.startswith("Published w9 v1") for message in messages_of(page))


def test_publish_without_a_scorecard_says_to_simulate_first(builder, organization):
    draft = draft_with_case(organization)

    confirm = builder.get(url("publish", draft)).content.decode()

    assert "simulate it first" in confirm


# --- deploy -------------------------------------------------------------------------------------------------


def test_deploy_from_the_version_page_with_confirmation(builder, organization):
    version = published_version(AgentFactory(organization=organization, slug="w9"))

    page = builder.get(url("change", version)).content.decode()
    confirm = builder.get(url("deploy", version)).content.decode()
    response = builder.post(url("deploy", version), {"organization": organization.pk}, follow=True)

    assert 'id="lucia-deploy"' in page
    assert "acme" in confirm and "not deployed yet" in confirm
    deployment = Deployment.objects.get(organization=organization, active=True)
    assert deployment.version_id == version.pk
    assert any("Deployed w9 v1 to acme" in message for message in messages_of(response))


def test_deploy_refuses_an_organization_outside_the_users(builder, organization):
    version = published_version(AgentFactory(organization=organization, slug="w9"))
    elsewhere = OrganizationFactory()

    response = builder.post(url("deploy", version), {"organization": elsewhere.pk}, follow=True)

    assert not Deployment.objects.exists()
    assert any("Choose one of your organizations" in message for message in messages_of(response))


def test_a_draft_cannot_be_deployed(builder, organization):
    draft = draft_version(AgentFactory(organization=organization, slug="w9"))

    assert builder.get(url("deploy", draft)).status_code == 403
    assert 'id="lucia-deploy"' not in builder.get(url("change", draft)).content.decode()


# --- permissions and scope ----------------------------------------------------------------------------------


def test_a_viewer_sees_no_builder_buttons_and_every_builder_post_is_refused(client, organization):
    client.force_login(staff_user("vic", permissions=VIEWER_PERMISSIONS, organizations=[organization]))
    draft = draft_with_case(organization)
    published = published_version(AgentFactory(organization=organization, slug="other"))

    page = client.get(url("change", draft)).content.decode()

    assert client.get(url("change", draft)).status_code == 200
    for button in ("lucia-simulate", "lucia-publish", "lucia-deploy", "lucia-validate"):
        assert f'id="{button}"' not in page
    assert client.post(url("simulate", draft)).status_code == 403
    assert client.post(url("publish", draft)).status_code == 403
    assert client.post(url("deploy", published), {"organization": organization.pk}).status_code == 403
    assert client.get(url("diff", draft)).status_code == 200  # reading is fine
    assert not Simulation.objects.exists() and not Deployment.objects.exists()
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT


def test_a_builder_without_add_deployment_cannot_deploy(client, organization):
    permissions = [p for p in BUILDER_PERMISSIONS if p != "agents.add_deployment"]
    client.force_login(staff_user("bo", permissions=permissions, organizations=[organization]))
    version = published_version(AgentFactory(organization=organization, slug="w9"))

    assert 'id="lucia-deploy"' not in client.get(url("change", version)).content.decode()
    assert client.post(url("deploy", version), {"organization": organization.pk}).status_code == 403


def test_another_organizations_versions_are_out_of_reach(builder):
    theirs = draft_with_case(OrganizationFactory(slug="globex"))
    card = scorecards.score(theirs)
    published = published_version(AgentFactory(organization=theirs.agent.organization, slug="other"))

    assert builder.get(url("change", theirs)).status_code in (302, 404)
    for name in ("diff", "publish"):
        assert builder.get(url(name, theirs)).status_code == 404
    assert builder.post(url("simulate", theirs)).status_code == 404
    assert builder.get(url("progress", theirs, card.simulation_id)).status_code == 404
    assert builder.post(url("deploy", published), {"organization": published.agent.organization_id}).status_code == 404
    listing = builder.get(reverse("admin:agents_agentversion_changelist")).content.decode()
    assert "globex" not in listing
    assert builder.get(reverse("admin:simulator_scorecard_change", args=[card.pk])).status_code in (302, 404)
    assert "globex" not in builder.get(reverse("admin:agents_agent_add")).content.decode()


def test_templates_are_readable_but_not_built_by_a_builder(builder):
    template = AgentFactory(organization=None, slug="w9-template")
    draft = versions.create_draft(template, source=source_with_case("w9-template"))

    page = builder.get(url("change", draft))

    assert page.status_code == 200
    assert 'id="lucia-simulate"' not in page.content.decode() and 'name="source"' not in page.content.decode()
    assert builder.post(url("simulate", draft)).status_code == 403
    assert builder.post(url("publish", draft)).status_code == 403
    assert not Simulation.objects.exists()
