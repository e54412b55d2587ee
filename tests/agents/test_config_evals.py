"""Eval cases: the simulator's vocabulary (start, human, faults, new traits and expectations) is validated with
paths and hints, compiles to what the simulator reads, and names only what the runtime knows."""

from __future__ import annotations

from typing import get_args

from agents import config
from agents.config import schema_evals
from runs import answer_options, answers  # noqa: F401 - answers registers the options
from runs.models import EscalationKind
from tests.agents.config_helpers import minimal, validate


def with_case(**fields) -> dict:
    data = minimal()
    data["evals"][0].update(fields)
    return data


def test_the_new_vocabulary_validates_and_compiles():
    data = with_case(
        start="2026-12-28",
        human=[{"after": "2h", "option": "guide_agent", "text": "Ask for it by email."},
               {"option": "switch_channel", "data": {"channels": ["sms"]}, "kind": "stuck"}],
        faults=[{"kind": "model_429", "from_day": 3, "to_day": 4},
                {"kind": "provider_unreachable", "channel": "email", "from_day": 1, "at": "10:00", "lasts": "6h"}],
        personas={"vendor": {"traits": [
            {"type": "replies_after", "days": 2, "text": "Paying Friday.", "relative_to": "latest", "via": "thread"},
            {"type": "redelivers", "message": 0, "after": "10m"},
            {"type": "answers_call", "transcript": "Who is this?"}]}},
        expect={"escalations": 1, "escalation_kinds": ["question"], "escalated_by_day": 3, "not_done_before_day": 5,
                "messages": [{"days": [0, 6], "kind": "chasing", "max": 2}],
                "per_period": [{"days": 7, "max": 1}], "quiet_after": [{"event": "first_reply", "days": 13}],
                "content": [{"contains": "attach"}, {"not_contains": "lawsuit", "kind": "acknowledgement"}],
                "no_episodes_after_escalation": True, "no_open_escalation_at_completion": True})

    result = validate(data)

    assert result.ok, [str(e) for e in result.errors]
    [case] = config.compile_config(result.config)["evals"]
    assert case["start"] == "2026-12-28"
    assert case["human"] == [{"option": "guide_agent", "after": 7200, "text": "Ask for it by email.", "data": {},
                              "kind": None},
                             {"option": "switch_channel", "after": 3600, "text": "", "data": {"channels": ["sms"]},
                              "kind": "stuck"}]
    assert case["faults"][1] == {"kind": "provider_unreachable", "from_day": 1, "at": "10:00", "to_day": None,
                                 "lasts": 21600, "channel": "email"}
    traits = case["personas"]["vendor"]["traits"]
    assert traits[1] == {"type": "redelivers", "message": 0, "after": 600}
    assert traits[2]["transcripts"] == ["Who is this?"]
    assert case["expect"]["per_period"] == [{"min": None, "max": 1, "days": 7, "kind": "chasing", "from_day": 0}]


def test_errors_name_the_path_and_say_how_to_fix_it():
    data = with_case(
        start="2026-13-01",
        human=[{"option": "approve"}],
        faults=[{"kind": "model_429", "from_day": 3}, {"kind": "model_5xx", "from_day": 1, "lasts": "1h",
                                                       "channel": "sms"}],
        expect={"messages": [{"days": [4, 2], "max": 1}], "content": [{"contains": "a", "not_contains": "b"}],
                "escalated_by_day": 90})

    errors = {error.path: error for error in validate(data).errors}

    assert errors["evals[0].start"].hint == "write YYYY-MM-DD, e.g. 2026-12-28"
    assert "evals[0].human[0].option" in errors
    assert errors["evals[0].faults[0]"].hint == "e.g. to_day: 4, or lasts: 6h"
    assert errors["evals[0].faults[1]"].message == "a model fault has no channel"
    assert errors["evals[0].expect.messages[0].days"].hint.startswith("write [first_day, last_day]")
    assert "exactly one non-empty contains or not_contains" in errors["evals[0].expect.content[0]"].message


def test_a_day_after_the_simulation_is_refused():
    errors = validate(with_case(expect={"escalated_by_day": 60}, faults=[{"kind": "model_429", "from_day": 50,
                                                                          "to_day": 51}])).errors

    assert sorted(error.path for error in errors) == ["evals[0].expect.escalated_by_day", "evals[0].faults[0].from_day"]
    assert all("after the simulation ends (day 42)" in error.message for error in errors)


def test_the_schema_names_exactly_the_runtimes_answer_options_and_escalation_kinds():
    approvals = {"approve", "edit", "reject"}  # scripted under `approvals`
    registered = {option.name for option in answer_options.all_options()} - approvals
    assert set(get_args(schema_evals.HumanOption)) == registered
    assert set(get_args(schema_evals.EscalationKindName)) == set(EscalationKind.values) - {EscalationKind.APPROVAL}
