import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents import versions
from runs.models import Run
from simulator.models import Scorecard, Simulation
from tests.factories import AgentFactory, OrganizationFactory
from tests.simulator.conftest import collector_draft

pytestmark = pytest.mark.django_db


def simulate(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `manage.py simulate *args`."""
    out, err = StringIO(), StringIO()
    try:
        call_command("simulate", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    return code, out.getvalue(), err.getvalue()


def test_prints_each_case_timeline_and_the_scorecard_table(good_draft, engine):
    code, out, err = simulate("document-collector", "--all", "--weeks", "6")

    assert code == 0, out
    for case in good_draft.compiled["evals"]:
        assert f"== {case['name']} (pass)" in out
    # virtual day, time, direction, channel, kind, summary
    assert re.search(r"^   day 0 +Mon \d\d:\d\d [A-Z]+ +-> +email +send_email +", out, re.MULTILINE)
    header = next(line for line in out.splitlines() if line.startswith("case"))
    assert header.split() == ["case", "result", "days", "to", "done", "messages", "escalations", "reasons"]
    assert "document-collector v1: PASSED" in out
    # Progress goes to stderr; off a terminal it is one line per case, not a redrawn bar.
    count = len(good_draft.compiled["evals"])
    assert f"simulating case 1/{count}: {good_draft.compiled['evals'][0]['name']}" in err
    assert "\r" not in err
    assert Scorecard.objects.get().passed


def test_on_a_terminal_the_progress_bar_is_redrawn_in_place():
    from simulator import report

    written: list[str] = []
    bar = report.ProgressBar(written.append, width=10)
    bar(0, 2, "first", 0.5)
    bar(1, 2, "second", 1.0)
    bar.close()

    assert written == ["\r[##--------]  25% first", "\r[##########] 100% second", "\n"]


def test_json_output_parses_as_the_scorecard_and_has_no_progress_bar(good_draft, engine):
    code, out, err = simulate("document-collector", "--json")

    card = json.loads(out)
    assert code == 0
    assert (card["agent"], card["version"], card["passed"]) == ("document-collector", 1, True)
    assert card["id"] == Scorecard.objects.get().pk
    assert {case["name"] for case in card["cases"]} == {case["name"] for case in good_draft.compiled["evals"]}
    assert "%" not in err


def test_a_failing_version_exits_1_and_shows_fail(broken_draft, engine):
    code, out, _ = simulate("document-collector")

    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("silent-vendor-escalates"))
    assert row.split()[1] == "FAIL"
    assert "FAILED" in out


def test_chosen_cases_run_alone_and_save_no_scorecard(good_draft, engine):
    code, out, _ = simulate("document-collector", "--case", "silent-vendor-escalates", "--json")

    card = json.loads(out)
    assert code == 0
    assert [case["name"] for case in card["cases"]] == ["silent-vendor-escalates"]
    assert card["id"] is None
    assert Simulation.objects.count() == 1
    assert not Scorecard.objects.exists()


def test_unknown_agent_names_the_valid_agents(good_draft):
    with pytest.raises(CommandError, match="unknown agent 'nope' in the templates; choose from: document-collector"):
        call_command("simulate", "nope")


def test_an_organizations_agent_is_simulated_in_its_shadow_organization(fake_engine):
    organization = OrganizationFactory(slug="acme")
    mine = collector_draft(agent=AgentFactory(organization=organization, slug="document-collector"))
    collector_draft()  # the template of the same slug

    code, out, _ = simulate("document-collector", "--organization", "acme", "--json")

    assert json.loads(out)["version_id"] == mine.pk
    assert Simulation.objects.get().organization.slug == "acme-sim"
    with pytest.raises(CommandError, match="unknown organization 'nope'"):
        call_command("simulate", "document-collector", "--organization", "nope")


def test_unknown_case_names_the_valid_cases(good_draft):
    with pytest.raises(CommandError, match="unknown case typo .*silent-vendor-escalates"):
        call_command("simulate", "document-collector", "--case", "typo")


def test_default_version_is_the_latest_valid_one(fake_engine):
    agent = AgentFactory(organization=None, slug="document-collector")
    first = collector_draft(agent=agent)
    versions.create_draft(agent, source="slug: document-collector\n")  # v2, invalid

    code, out, _ = simulate("document-collector", "--json")

    assert json.loads(out)["version_id"] == first.pk
    with pytest.raises(CommandError, match="v2 has config errors; valid versions: 1"):
        call_command("simulate", "document-collector", "--version", "2")


@pytest.mark.django_db(transaction=True)
def test_jobs_runs_cases_in_parallel_lanes_with_the_serial_results(engine):
    collector_draft()
    serial_code, serial_out, _ = simulate("document-collector", "--json", "--seed", "3")
    parallel_code, parallel_out, _ = simulate("document-collector", "--json", "--seed", "3", "--jobs", "2")

    def verdicts(out: str) -> list[tuple]:
        return [(case["name"], case["passed"], case["reasons"], case["metrics"]) for case in json.loads(out)["cases"]]

    assert serial_code == parallel_code == 0
    assert verdicts(parallel_out) == verdicts(serial_out)
    assert all(case["wall_seconds"] > 0 for case in json.loads(parallel_out)["cases"])
    # Each lane simulated in its own shadow organization.
    runs = Run.objects.filter(pk__in=[case["run_id"] for case in json.loads(parallel_out)["cases"]])
    assert {run.organization.slug for run in runs} == {"simulation", "simulation-lane1-sim"}


def test_jobs_must_be_positive(good_draft):
    with pytest.raises(CommandError, match="--jobs must be at least 1"):
        call_command("simulate", "document-collector", "--jobs", "0")
