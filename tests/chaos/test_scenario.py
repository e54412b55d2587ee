"""The chaos agent with a shorter ladder (`python -m chaos --rungs N`): still a valid agent, the ladder cut at N."""

import pytest

from agents.config.validation import validate_source
from chaos import scenario


def test_a_shorter_agent_keeps_the_first_rungs_and_stops_after_them(tmp_path):
    path = scenario.shorter_agent(3, into=tmp_path)

    result = validate_source(path.read_text())

    assert result.ok, result.errors
    followup = result.config.followup
    assert [step.channel for step in followup.steps] == ["sms", "email", "sms"]
    assert followup.max_attempts == 3


@pytest.mark.parametrize("rungs", [0, 12])
def test_a_ladder_longer_than_the_agents_or_empty_is_refused(tmp_path, rungs):
    with pytest.raises(ValueError, match="the agent's ladder has 11 rungs"):
        scenario.shorter_agent(rungs, into=tmp_path)
