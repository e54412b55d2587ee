"""The follow-up ladder: steps, replies and deferrals (runs/policy/ladder.py). Pure, no database."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from runs import policy
from tests.runs.policy_helpers import NY, OFFSET, RUN, at, make_plan, step

# --- ladder ---------------------------------------------------------------------------------------------------------


def test_start_in_business_hours_schedules_step_zero_now_on_its_channel():
    now = at(NY, 2024, 6, 3, 10, 0)  # Monday
    result, _ = step(make_plan(), policy.initial_state(), now, "start")
    assert (result.action, result.step, result.channel, result.due_at) == ("followup", 0, "email", now)
    assert result.wake_when == "followup:w9"


def test_start_on_a_weekend_moves_step_zero_to_monday_opening_plus_run_offset():
    result, _ = step(make_plan(), policy.initial_state(), at(NY, 2024, 6, 1, 10, 0), "start")  # Saturday
    assert result.due_at == at(NY, 2024, 6, 3, 9, 0) + OFFSET


def test_a_sent_step_arms_the_next_one_after_its_delay():
    plan, now = make_plan(), at(NY, 2024, 6, 3, 10, 0)
    _, state = step(plan, policy.initial_state(), now, "start")
    result, state = step(plan, state, now, "followup", outreach_sent=True)
    assert (result.action, result.step, result.channel) == ("followup", 1, "email")
    assert result.due_at == at(NY, 2024, 6, 5, 10, 0)  # two business days
    assert (state["ladder_step"], state["attempts"]) == (1, 1)
    assert datetime.fromisoformat(state["last_outreach_at"]) == now


def test_silence_walks_the_ladder_then_escalates_once_and_never_wakes_again():
    plan, state = make_plan(), policy.initial_state()
    result, state = step(plan, state, at(NY, 2024, 6, 3, 10, 0), "start")
    seen = []
    while result.due_at is not None:
        seen.append((result.action, result.step, result.channel, result.due_at))
        result, state = step(plan, state, result.due_at, "followup", outreach_sent=result.step is not None)
    assert seen == [
        ("followup", 0, "email", at(NY, 2024, 6, 3, 10, 0)),
        ("followup", 1, "email", at(NY, 2024, 6, 5, 10, 0)),
        ("followup", 2, "sms", at(NY, 2024, 6, 10, 9, 0) + OFFSET),  # Sat 10:00 → Monday opening
        ("followup", None, None, at(NY, 2024, 6, 13, 9, 0) + OFFSET),  # answer deadline: the SMS gets 3 days
    ]
    assert result.action == "escalate" and result.wake_when is None
    assert state["exhausted"] and state["attempts"] == 3
    later = at(NY, 2024, 6, 20, 10, 0)
    for event in ("followup", "reply", "human_answer", "event"):
        assert step(plan, state, later, event)[0].action == "idle"


@pytest.mark.parametrize(("on_exhausted", "action"), [("fail", "fail"), ("complete_quietly", "complete")])
def test_spent_ladder_applies_on_exhausted(on_exhausted, action):
    plan = make_plan(max_attempts=1, on_exhausted=on_exhausted)
    now = at(NY, 2024, 6, 3, 10, 0)
    _, state = step(plan, policy.initial_state(), now, "start")
    deadline, state = step(plan, state, now, "followup", outreach_sent=True)
    assert (deadline.action, deadline.step, deadline.channel) == ("followup", None, None)
    result, state = step(plan, state, deadline.due_at, "followup")
    assert result.action == action and state["exhausted"]


def test_max_attempts_beyond_the_ladder_repeats_its_last_rung():
    plan, now = make_plan(max_attempts=5), at(NY, 2024, 6, 3, 10, 0)
    state = policy.initial_state() | {"ladder_step": 3, "attempts": 3, "next_due_at": now.isoformat()}
    result, _ = step(plan, state, now, "followup", outreach_sent=True)
    assert (result.step, result.channel, result.due_at) == (4, "sms", at(NY, 2024, 6, 6, 10, 0))


def test_start_episode_that_reached_out_counts_as_step_zero():
    now = at(NY, 2024, 6, 3, 10, 0)
    result, state = step(make_plan(), policy.initial_state(), now, "start", outreach_sent=True)
    assert (result.step, result.due_at, state["attempts"]) == (1, at(NY, 2024, 6, 5, 10, 0), 1)


def test_step_that_ran_without_sending_still_counts_toward_the_bound():
    plan, now = make_plan(), at(NY, 2024, 6, 3, 10, 0)
    _, state = step(plan, policy.initial_state(), now, "start")
    result, state = step(plan, state, now, "followup", outreach_sent=False)
    assert result.step == 1 and (state["ladder_step"], state["attempts"]) == (1, 0)
    assert state["last_outreach_at"] is None


def test_step_fired_late_into_quiet_hours_is_retried_not_counted():
    plan = make_plan()
    state = policy.initial_state() | {"next_due_at": at(NY, 2024, 6, 3, 16, 59).isoformat()}
    result, state = step(plan, state, at(NY, 2024, 6, 3, 22, 0), "followup", outreach_sent=False)
    assert (result.step, result.due_at) == (0, at(NY, 2024, 6, 4, 9, 0) + OFFSET)
    assert state["ladder_step"] == 0


def test_follow_up_wake_before_its_due_time_changes_nothing():
    plan, now = make_plan(), at(NY, 2024, 6, 3, 10, 0)
    pending = at(NY, 2024, 6, 5, 10, 0)
    state = policy.initial_state() | {"ladder_step": 1, "attempts": 1, "next_due_at": pending.isoformat()}
    result, after = step(plan, state, now, "followup", outreach_sent=False)
    assert (result.step, result.due_at, after["ladder_step"]) == (1, pending, 1)


def test_state_updates_are_json_ready():
    plan, now = make_plan(), at(NY, 2024, 6, 3, 10, 0)
    _, state = step(plan, policy.initial_state(), now, "start")
    result, _ = step(plan, state, now, "followup", outreach_sent=True)
    json.dumps(result.state_updates)


def test_unknown_event_and_naive_now_are_refused():
    with pytest.raises(ValueError, match="unknown event"):
        step(make_plan(), policy.initial_state(), at(NY, 2024, 6, 3, 10, 0), "poke")
    with pytest.raises(ValueError, match="timezone-aware"):
        step(make_plan(), policy.initial_state(), datetime(2024, 6, 3, 10, 0), "start")


# --- replies --------------------------------------------------------------------------------------------------------


def after_step_one(plan: dict) -> dict:
    return policy.initial_state() | {
        "ladder_step": 2,
        "attempts": 2,
        "last_outreach_at": at(NY, 2024, 6, 5, 10, 0).isoformat(),
        "next_due_at": at(NY, 2024, 6, 10, 9, 0).isoformat(),
    }


def test_only_a_reply_cancels_the_pending_follow_up():
    assert policy.cancels_pending_followup("reply")
    assert not any(policy.cancels_pending_followup(event) for event in ("start", "followup", "human_answer", "event"))


def test_reply_with_pause_resumes_the_same_step_after_the_grace():
    plan = make_plan(on_reply="pause")
    result, state = step(plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "reply")
    assert (result.action, result.step, result.channel) == ("followup", 2, "sms")
    assert result.due_at == at(NY, 2024, 6, 7, 11, 0)
    assert (state["ladder_step"], state["attempts"]) == (2, 2)


def test_reply_with_restart_starts_the_ladder_over_after_the_grace():
    plan = make_plan(on_reply="restart")
    result, state = step(plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "reply")
    assert (result.step, result.channel, result.due_at) == (0, "email", at(NY, 2024, 6, 7, 11, 0))
    assert (state["ladder_step"], state["attempts"], state["exhausted"]) == (0, 0, False)


def test_reply_with_stop_schedules_nothing_and_a_stale_wake_does_not_resume_chasing():
    plan = make_plan(on_reply="stop")
    result, state = step(plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "reply")
    assert (result.action, result.due_at, result.wake_when) == ("wait_reply", None, "reply:email")
    assert state["next_due_at"] is None
    stale, after = step(plan, state, at(NY, 2024, 6, 10, 9, 0), "followup")
    assert (stale.action, stale.due_at, after["ladder_step"]) == ("wait_reply", None, 2)


def test_reply_at_the_answer_deadline_with_pause_moves_the_deadline():
    plan = make_plan(on_reply="pause")
    state = policy.initial_state() | {"ladder_step": 3, "attempts": 3, "next_due_at": "2024-06-13T09:00:00-04:00"}
    result, _ = step(plan, state, at(NY, 2024, 6, 12, 11, 0), "reply")
    assert (result.action, result.step, result.due_at) == ("followup", None, at(NY, 2024, 6, 13, 11, 0))


def test_reply_after_exhaustion_restarts_only_under_restart():
    state = policy.initial_state() | {"ladder_step": 3, "attempts": 3, "exhausted": True}
    now = at(NY, 2024, 6, 20, 11, 0)
    assert step(make_plan(on_reply="pause"), state, now, "reply")[0].action == "idle"
    result, after = step(make_plan(on_reply="restart"), state, now, "reply")
    assert result.step == 0 and not after["exhausted"]


def test_human_answer_keeps_the_pending_schedule():
    plan = make_plan()
    result, _ = step(plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "human_answer")
    assert (result.step, result.due_at) == (2, at(NY, 2024, 6, 10, 9, 0))


def test_outreach_in_a_human_answer_episode_rearms_the_step_without_counting():
    plan = make_plan()
    now = at(NY, 2024, 6, 6, 11, 0)
    result, state = step(plan, after_step_one(plan), now, "human_answer", outreach_sent=True)
    assert (result.step, result.due_at) == (2, at(NY, 2024, 6, 10, 9, 0) + OFFSET)  # Thu + 3d = Sun → Monday
    assert (state["attempts"], datetime.fromisoformat(state["last_outreach_at"])) == (2, now)


# --- deferral -------------------------------------------------------------------------------------------------------


def test_out_of_office_reply_defers_the_next_contact_to_the_return_date():
    plan = make_plan(on_reply="pause")
    back = at(NY, 2024, 6, 14, 0, 0)
    result, state = step(plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "reply", defer_until=back)
    assert (result.step, result.due_at) == (2, at(NY, 2024, 6, 14, 9, 0) + OFFSET)
    assert state["paused_until"] == result.due_at.isoformat()
    # An outreach before the return date must not pull the chase earlier than the deferral.
    rearmed, _ = step(plan, state, at(NY, 2024, 6, 7, 10, 0), "event", outreach_sent=True)
    assert rearmed.due_at == result.due_at


def test_explicit_defer_wins_over_on_reply_stop():
    plan = make_plan(on_reply="stop")
    result, _ = step(
        plan, after_step_one(plan), at(NY, 2024, 6, 6, 11, 0), "reply", defer_until=at(NY, 2024, 6, 10, 14, 0)
    )
    assert (result.action, result.due_at) == ("followup", at(NY, 2024, 6, 10, 14, 0))


def test_defer_on_a_spent_ladder_moves_the_answer_deadline_past_the_return():
    plan = make_plan()
    state = policy.initial_state() | {"ladder_step": 3, "attempts": 3, "next_due_at": "2024-06-13T09:00:00-04:00"}
    result, _ = step(plan, state, at(NY, 2024, 6, 11, 11, 0), "event", defer_until=at(NY, 2024, 6, 17, 10, 0))
    assert (result.action, result.step, result.due_at) == ("followup", None, at(NY, 2024, 6, 20, 10, 0))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (at(NY, 2024, 6, 1, 10, 0), at(NY, 2024, 6, 3, 10, 0)),  # in the past → now
        (at(NY, 2024, 6, 4, 23, 0), at(NY, 2024, 6, 5, 9, 0) + OFFSET),  # quiet hours → next opening
        (at(NY, 2024, 6, 8, 12, 0), at(NY, 2024, 6, 10, 9, 0) + OFFSET),  # Saturday → Monday
        (at(NY, 2025, 1, 1, 10, 0), at(NY, 2024, 8, 2, 10, 0)),  # a year away → 60 days
    ],
)
def test_clamp_defer_keeps_requests_within_bounds_and_the_send_window(requested, expected):
    now = at(NY, 2024, 6, 3, 10, 0)
    assert policy.clamp_defer(make_plan(), requested=requested, now=now, tz=NY, run_id=RUN) == expected


def test_clamp_defer_refuses_a_naive_datetime():
    with pytest.raises(ValueError, match="timezone-aware"):
        policy.clamp_defer(make_plan(), requested=datetime(2024, 6, 4), now=at(NY, 2024, 6, 3, 10), tz=NY, run_id=RUN)
