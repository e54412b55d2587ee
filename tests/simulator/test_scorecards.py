import pytest

from agents.models import Organization
from connectors.models import Identity
from simulator import scorecards, sim_org
from simulator.models import Scorecard, SimulationStatus
from tests.factories import OrganizationFactory, draft_version

pytestmark = pytest.mark.django_db


def test_a_good_version_gets_a_passing_scorecard_for_its_config(good_draft, engine):
    card = scorecards.score(good_draft, seed=7)

    assert card.passed, card.cases
    assert (card.version_id, card.config_hash, card.seed) == (good_draft.pk, good_draft.config_hash, 7)
    golden = [case["name"] for case in good_draft.compiled["evals"]]
    assert [case["name"] for case in card.cases] == golden
    assert card.metrics["cases"] == card.metrics["passed"] == len(golden)
    assert card.simulation.status == SimulationStatus.PASSED
    assert all(result["timeline"] for result in card.simulation.results)


def test_a_broken_version_fails_its_scorecard_naming_the_case(broken_draft, engine):
    card = scorecards.score(broken_draft)

    assert not card.passed
    failed = {case["name"]: case["reasons"] for case in card.cases if not case["passed"]}
    assert "silent-vendor-escalates" in failed
    assert failed["silent-vendor-escalates"]
    assert card.simulation.status == SimulationStatus.FAILED
    assert scorecards.latest(broken_draft) == card


def test_a_case_the_engine_crashes_on_fails_without_hiding_the_others(good_draft, fake_engine, monkeypatch):
    real = fake_engine.run_case

    def crash_on_stop(version, case, **kwargs):
        if case["name"] == "stop-on-sms":
            raise RuntimeError("boom")
        return real(version, case, **kwargs)

    monkeypatch.setattr(fake_engine, "run_case", crash_on_stop)

    card = scorecards.score(good_draft)

    by_name = {case["name"]: case for case in card.cases}
    assert not card.passed
    assert by_name["stop-on-sms"]["reasons"] == ["simulation error: RuntimeError: boom"]
    assert by_name["replies-with-pdf-after-3-days"]["passed"]
    assert card.simulation.status == SimulationStatus.ERROR


def test_a_version_without_cases_fails(fake_engine):
    card = scorecards.score(draft_version())  # the factory agent has no evals

    assert not card.passed
    assert card.cases == []
    assert "no eval cases" in card.metrics["reason"]


def test_an_invalid_version_cannot_be_simulated():
    with pytest.raises(scorecards.SimulationError, match="config errors"):
        scorecards.score(draft_version(source="slug: nope\n"))
    assert not Scorecard.objects.exists()


def test_an_unknown_case_names_the_valid_choices(good_draft):
    with pytest.raises(scorecards.SimulationError) as error:
        scorecards.select_cases(good_draft, names=["nope"])

    assert "silent-vendor-escalates" in str(error.value)


def test_simulations_run_in_a_sandbox_shadow_of_the_callers_organization(good_draft, fake_engine):
    customer = OrganizationFactory(slug="acme")

    card = scorecards.score(good_draft, organization=customer)

    shadow = card.simulation.organization
    assert shadow.slug == "acme-sim"
    channels = set(Identity.objects.filter(organization=shadow, sandbox=True).values_list("channel", flat=True))
    assert channels == {"email", "sms", "slack", "voice"}
    assert not Identity.objects.filter(organization=customer).exists()
    assert sim_org.organization_for(customer) == shadow  # get-or-create: the second call reuses it
    assert Organization.objects.filter(slug__startswith="acme").count() == 2


def test_progress_is_reported_per_case_up_to_done(good_draft, fake_engine):
    seen = []

    scorecards.score(good_draft, progress=lambda index, count, name, fraction: seen.append((index, name, fraction)))

    assert seen[-1] == (len(good_draft.compiled["evals"]), "", 1.0)
    assert (0, "replies-with-pdf-after-3-days", 0.5) in seen
    overall = [(index + fraction) for index, _, fraction in seen]
    assert overall == sorted(overall)
