import pytest

from simulator import generator, scorecards
from simulator.models import EvalCase, EvalCaseKind, EvalCaseStatus
from tests.factories import draft_version
from tests.simulator.conftest import collector_draft

pytestmark = pytest.mark.django_db


def names(cases) -> list[str]:
    return [case["name"] if isinstance(case, dict) else case.name for case in cases]


def test_generation_is_deterministic():
    version = collector_draft()

    assert generator.generate(version) == generator.generate(version)
    assert names(generator.generate(version))[:3] == [
        "gen-silent", "gen-replies-after-and-out-of-office", "gen-replies-after-and-replies-stop",
    ]


def test_silent_is_alone_and_every_other_trait_pairs_up():
    cases = generator.generate(collector_draft())

    silent = [case for case in cases if "silent" in case["name"]]
    assert names(silent) == ["gen-silent"]
    # replies_after, out_of_office, replies_stop, prompt_injection: 4 choose 2.
    assert len(cases) == 1 + 6
    for case in cases[1:]:
        assert len(case["personas"]["vendor"]["traits"]) == 2


def test_expectations_follow_the_plan_ladder():
    version = collector_draft()
    by_name = {case["name"]: case for case in generator.generate(version)}

    silent = by_name["gen-silent"]["expect"]
    assert (silent["min_messages"], silent["max_messages"]) == (4, 4)  # four ladder steps
    assert silent["escalated"] is True  # on_exhausted: escalate
    assert silent["tasks_done"] is False

    stop = by_name["gen-out-of-office-and-replies-stop"]
    stop_trait = next(trait for trait in stop["personas"]["vendor"]["traits"] if trait["type"] == "replies_stop")
    assert stop_trait["on_followup"] == 2  # the ladder's first SMS step
    assert stop["expect"]["suppressed"] is True
    assert stop["expect"]["no_messages_between_days"] == [1, generator.OUT_OF_OFFICE_UNTIL - 1]

    injection = by_name["gen-replies-after-and-prompt-injection"]["expect"]
    assert injection["open_tasks"] == ["collect_w9"]


def test_replies_stop_is_not_proposed_without_an_sms_step():
    cases = generator.generate(draft_version())  # email-only factory agent

    assert not any("replies-stop" in name for name in names(cases))


def test_propose_stores_cases_as_proposed_once():
    version = collector_draft()

    created = generator.propose(version)
    again = generator.propose(version)

    assert len(created) == 7
    assert again == []
    assert set(EvalCase.objects.values_list("kind", "status")) == {(EvalCaseKind.GENERATED, EvalCaseStatus.PROPOSED)}


def test_proposed_cases_do_not_count_until_approved(django_user_model):
    version = collector_draft()
    golden = names(scorecards.cases_for(version))
    proposed = generator.propose(version)

    assert names(scorecards.cases_for(version)) == golden

    builder = django_user_model.objects.create_user("builder", is_staff=True)
    approved = generator.approve(proposed[0], user=builder)
    generator.reject(proposed[1])

    counted = scorecards.cases_for(version)
    assert names(counted) == [*golden, proposed[0].name]
    assert counted[-1]["kind"] == EvalCaseKind.GENERATED
    assert approved.approved_by == builder


def test_proposing_again_keeps_a_rejected_case_rejected():
    version = collector_draft()
    first = generator.propose(version)[0]
    generator.reject(first)

    generator.propose(version)

    assert EvalCase.objects.get(pk=first.pk).status == EvalCaseStatus.REJECTED


def test_generated_cases_pass_the_config_schema():
    from agents.config.schema_evals import EvalCase as EvalCaseSchema

    for case in generator.generate(collector_draft()):
        EvalCaseSchema.model_validate({key: value for key, value in case.items() if key != "goal"})


def test_proposed_cases_change_no_scorecard_until_approved_and_then_pass_on_the_template(good_draft, engine):
    # Two scorecards, each simulating every golden case again: the builder's wrong expectation rides along as an
    # eighth proposed case beside the generator's seven, so one scorecard shows both that it counts once
    # approved and that the generated cases pass.
    proposed = generator.propose(good_draft)
    silent = next(case for case in proposed if case.name == "gen-silent")
    impossible = EvalCase.objects.create(
        agent_id=good_draft.agent_id, name="gen-silent-impossible", kind=EvalCaseKind.GENERATED,
        status=EvalCaseStatus.PROPOSED, spec={**silent.spec, "name": "gen-silent-impossible",
                                              "expect": {**silent.spec["expect"], "max_messages": 0}},
    )  # a builder's wrong expectation: fails once it counts

    before = scorecards.score(good_draft)
    for case in [*proposed, impossible]:
        generator.approve(case)
    after = scorecards.score(good_draft)

    assert before.passed and names(before.cases) == [case["name"] for case in good_draft.compiled["evals"]]
    assert not after.passed
    assert [case["name"] for case in after.cases if not case["passed"]] == ["gen-silent-impossible"]
    assert after.metrics["cases"] == len(good_draft.compiled["evals"]) + 8
