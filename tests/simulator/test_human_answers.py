"""The scripted human answers escalations through runs.answers, at the virtual time the case says."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runs.models import Episode, EpisodeKind, Escalation, EscalationKind, EscalationStatus, OutboxMessage
from tests.simulator.test_golden_cases import template_version
from tests.simulator.test_personas import case, simulate

pytestmark = pytest.mark.django_db

# A reply the agent cannot act on alone: it asks a human (a question escalation).
CLAIM = {"type": "replies_after", "days": 1, "text": "Wrong number, who is this?"}


def test_an_answer_comes_after_the_escalation_by_the_scripted_delay_and_wakes_the_run():
    result = simulate(template_version("document-collector"),
                      {**case("resume", CLAIM), "human": [{"option": "resume", "after": 7200}]})

    question = Escalation.objects.get(run_id=result.run_id, kind=EscalationKind.QUESTION)
    assert question.status == EscalationStatus.ANSWERED and question.answered_via == "simulator"
    assert question.answered_at == question.raised_at + timedelta(hours=2)
    answer = Episode.objects.get(run_id=result.run_id, kind=EpisodeKind.HUMAN_ANSWER)
    assert answer.due_at == question.answered_at and answer.payload["option"] == "resume"
    # Resumed: the ladder carries on after the answer instead of waiting on the human.
    assert OutboxMessage.objects.filter(run_id=result.run_id, sent_at__gt=question.answered_at).count() == 3
    assert result.metrics["human_answers"] == 1


def test_a_step_waits_for_an_escalation_of_its_kind():
    result = simulate(template_version("document-collector"),
                      {**case("stuck-only", CLAIM), "human": [{"option": "stop_run", "kind": "stuck", "after": 60}]})

    kinds = dict(Escalation.objects.filter(run_id=result.run_id).values_list("kind", "status"))
    assert kinds == {EscalationKind.QUESTION: EscalationStatus.OPEN}
    assert result.metrics["human_answers"] == 0


def test_an_option_the_escalation_refuses_fails_the_case_with_the_reason():
    result = simulate(template_version("document-collector"),
                      {**case("refused", CLAIM), "human": [{"option": "guide_agent", "after": 60}]})

    assert not result.passed
    [reason] = result.reasons
    assert reason.startswith("human[0]: guide_agent on the question escalation was refused: guide_agent needs text")
    assert any(row["type"] == "human" for row in result.timeline)
