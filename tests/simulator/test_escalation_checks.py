"""Escalation count, kinds and timing, and what the run did while one was open."""

from __future__ import annotations

from runs.models import Episode, Escalation
from simulator import expectations
from tests.simulator.test_expectations import at, facts


def test_exact_count_and_kinds_in_the_order_raised():
    raised = [Escalation(kind="question", raised_at=at(1, 9)), Escalation(kind="stuck", raised_at=at(21, 9))]

    reasons = expectations.check({"escalations": 1, "escalation_kinds": ["stuck", "question"]},
                                 facts(escalations=raised))

    assert reasons == ["escalations: 2 raised, expected exactly 1 (question on day 1, stuck on day 21)",
                       "escalation_kinds: raised [question, stuck], expected [stuck, question]"]


def test_escalated_by_day_and_not_done_before_day():
    late = [Escalation(kind="stuck", raised_at=at(21, 9))]

    assert expectations.check({"escalated_by_day": 14, "not_done_before_day": 5},
                              facts(escalations=late, done_on=3)) == [
        "not_done_before_day: collect_w9 was done on day 3, before day 5",
        "escalated_by_day: no escalation by day 14 (stuck on day 21)"]
    assert expectations.check({"escalated_by_day": 21, "not_done_before_day": 3},
                              facts(escalations=late, done_on=3)) == []


def test_a_timer_episode_while_an_escalation_was_open_is_reported_but_not_after_its_answer():
    question = Escalation(kind="question", status="answered", raised_at=at(1, 9), answered_at=at(2, 9))
    stuck = Escalation(kind="stuck", status="open", raised_at=at(21, 9))
    base = facts(escalations=[question, stuck])
    base.episodes = [Episode(kind="followup", status="done", due_at=at(1, 15)),
                     Episode(kind="followup", status="done", due_at=at(3, 9)),
                     Episode(kind="inbound", status="done", due_at=at(22, 9)),
                     Episode(kind="followup", status="cancelled", due_at=at(24, 9)),
                     Episode(kind="followup", status="done", due_at=at(28, 9))]

    assert expectations.check({"no_episodes_after_escalation": True}, base) == [
        "no_episodes_after_escalation: a followup episode ran on day 1 while the question escalation of day 1 was open",
        "no_episodes_after_escalation: a followup episode ran on day 28 while the stuck escalation of day 21 was open"]


def test_a_completed_run_with_an_open_escalation():
    still = Escalation(pk=9, kind="question", status="open", raised_at=at(1, 9))

    assert expectations.check({"no_open_escalation_at_completion": True},
                              facts(escalations=[still], status="completed")) == [
        "no_open_escalation_at_completion: the run completed with 1 open (question #9)"]
    assert expectations.check({"no_open_escalation_at_completion": True}, facts(escalations=[still])) == []
