"""The follow-up policy: pure functions, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runs import policy

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
RUN = 42
OFFSET = policy.run_offset(RUN)
DAY = 86400
QUIET = {"start": "20:00", "end": "08:00"}


def make_plan(*, quiet: dict | None = QUIET, hours: tuple[str, str] = ("09:00", "17:00"), **followup) -> dict:
    """Email now, email 2 business days later, SMS 3 calendar days later; 20:00–08:00 quiet by default."""
    ladder = [
        {"step": 0, "channel": "email", "delay_s": 0, "delay_business_days": 0},
        {"step": 1, "channel": "email", "delay_s": 0, "delay_business_days": 2},
        {"step": 2, "channel": "sms", "delay_s": 3 * DAY, "delay_business_days": 0},
    ]
    base = {
        "timezone_source": "contact",
        "timezone": None,
        "business_days": [0, 1, 2, 3, 4],
        "business_hours": {"start": hours[0], "end": hours[1]},
        "ladder": ladder,
        "max_attempts": 3,
        "on_exhausted": "escalate",
        "on_reply": "pause",
        "reply_grace_s": DAY,
    }
    return {
        "tasks": [{"key": "w9", "title": "W-9", "contact_role": "vendor", "required": True}],
        "followup": base | followup,
        "compliance": {"quiet_hours": quiet},
    }


def always_open(quiet: dict | None, **followup) -> dict:
    """Every day, all day, except the given quiet hours: isolates quiet-hour and DST behaviour."""
    return make_plan(quiet=quiet, hours=("00:00", "23:59"), business_days=[0, 1, 2, 3, 4, 5, 6], **followup)


def at(tz: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=tz, fold=fold)


def step(plan: dict, state: dict, now: datetime, event: str, **kwargs) -> tuple[policy.NextStep, dict]:
    """Run the policy and merge its updates, as the caller does."""
    result = policy.plan_next(
        plan, state=state, contact_tz="America/New_York", org_tz="UTC", now=now, event=event, run_id=RUN, **kwargs
    )
    return result, state | result.state_updates


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


# --- business days, hours and quiet hours ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "days", "expected"),
    [
        (at(NY, 2024, 6, 7, 16, 0), 1, at(NY, 2024, 6, 10, 16, 0)),  # Friday → Monday
        (at(NY, 2024, 6, 8, 10, 0), 1, at(NY, 2024, 6, 10, 10, 0)),  # Saturday → Monday
        (at(NY, 2024, 6, 6, 10, 0), 2, at(NY, 2024, 6, 10, 10, 0)),  # Thursday → Monday
        (at(NY, 2024, 6, 7, 10, 0), 5, at(NY, 2024, 6, 14, 10, 0)),  # a business week
        (at(NY, 2024, 6, 7, 10, 0), 0, at(NY, 2024, 6, 7, 10, 0)),
    ],
)
def test_add_business_days_skips_weekends(start, days, expected):
    assert policy.add_business_days(start, days, tz=NY, business_days=[0, 1, 2, 3, 4]) == expected


def test_add_business_days_follows_a_sunday_to_thursday_week():
    thursday = at(NY, 2024, 6, 6, 10, 0)
    assert policy.add_business_days(thursday, 1, tz=NY, business_days=[6, 0, 1, 2, 3]) == at(NY, 2024, 6, 9, 10, 0)


def test_business_day_delay_over_a_weekend_in_the_ladder():
    plan = make_plan()
    state = policy.initial_state() | {"next_due_at": at(NY, 2024, 6, 6, 15, 0).isoformat()}
    result, _ = step(plan, state, at(NY, 2024, 6, 6, 15, 0), "followup", outreach_sent=True)  # Thursday
    assert result.due_at == at(NY, 2024, 6, 10, 15, 0)  # Monday, same time


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (at(NY, 2024, 6, 3, 22, 0), at(NY, 2024, 6, 4, 8, 0) + OFFSET),  # evening → next morning
        (at(NY, 2024, 6, 4, 3, 0), at(NY, 2024, 6, 4, 8, 0) + OFFSET),  # small hours → same morning
        (at(NY, 2024, 6, 3, 20, 0), at(NY, 2024, 6, 4, 8, 0) + OFFSET),  # quiet starts at 20:00 sharp
        (at(NY, 2024, 6, 3, 19, 59), at(NY, 2024, 6, 3, 19, 59)),
        (at(NY, 2024, 6, 4, 8, 0), at(NY, 2024, 6, 4, 8, 0)),  # quiet ends at 08:00 sharp
    ],
)
def test_quiet_hours_wrapping_midnight(when, expected):
    assert (
        policy.next_allowed_instant(always_open({"start": "20:00", "end": "08:00"}), at=when, tz=NY, run_id=RUN)
        == expected
    )


def test_quiet_hours_inside_business_hours_split_the_day():
    plan = make_plan(quiet={"start": "12:00", "end": "13:00"})
    moved = policy.next_allowed_instant(plan, at=at(NY, 2024, 6, 3, 12, 30), tz=NY, run_id=RUN)
    assert moved == at(NY, 2024, 6, 3, 13, 0) + OFFSET


def test_after_business_hours_moves_to_next_business_morning():
    friday_evening = at(NY, 2024, 6, 7, 17, 0)
    assert (
        policy.next_allowed_instant(make_plan(), at=friday_evening, tz=NY, run_id=RUN)
        == at(NY, 2024, 6, 10, 9, 0) + OFFSET
    )


def test_plan_without_any_send_time_is_an_error():
    plan = make_plan(quiet={"start": "08:00", "end": "18:00"})
    with pytest.raises(ValueError, match="no time to send"):
        policy.next_allowed_instant(plan, at=at(NY, 2024, 6, 3, 10, 0), tz=NY, run_id=RUN)


# --- DST ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "night", "transition_utc"),
    [
        (NY, at(NY, 2024, 3, 10, 1, 30), datetime(2024, 3, 10, 7, 0, tzinfo=UTC)),  # 02:00 EST → 03:00 EDT
        (BERLIN, at(BERLIN, 2024, 3, 31, 1, 30), datetime(2024, 3, 31, 1, 0, tzinfo=UTC)),  # 02:00 CET → 03:00 CEST
    ],
)
def test_quiet_hours_ending_inside_the_spring_forward_gap_open_at_the_transition(tz, night, transition_utc):
    plan = always_open({"start": "22:00", "end": "02:30"})  # 02:30 does not exist that night
    assert policy.next_allowed_instant(plan, at=night, tz=tz, run_id=RUN) == transition_utc + OFFSET


@pytest.mark.parametrize(
    ("tz", "first_pass", "second_pass", "opening_utc"),
    [
        # New York repeats 01:00–02:00 (EDT, then EST); quiet ends 01:30.
        (NY, at(NY, 2024, 11, 3, 1, 10), at(NY, 2024, 11, 3, 1, 10, fold=1), datetime(2024, 11, 3, 5, 30, tzinfo=UTC)),
        # Berlin repeats 02:00–03:00 (CEST, then CET); quiet ends 02:30.
        (
            BERLIN,
            at(BERLIN, 2024, 10, 27, 2, 10),
            at(BERLIN, 2024, 10, 27, 2, 10, fold=1),
            datetime(2024, 10, 27, 0, 30, tzinfo=UTC),
        ),
    ],
)
def test_fall_back_window_opens_at_the_first_occurrence_and_stays_open(tz, first_pass, second_pass, opening_utc):
    end = "01:30" if tz is NY else "02:30"
    plan = always_open({"start": "22:00", "end": end})
    assert policy.next_allowed_instant(plan, at=first_pass, tz=tz, run_id=RUN) == opening_utc + OFFSET
    # The second pass of the same wall time comes after the opening: not quiet again.
    # (Compared in UTC: PEP 495 never equates an ambiguous local time with another zone's.)
    assert policy.next_allowed_instant(plan, at=second_pass, tz=tz, run_id=RUN) == second_pass.astimezone(UTC)


@pytest.mark.parametrize(
    ("tz", "friday", "monday_utc"),
    [
        (NY, at(NY, 2024, 3, 8, 10, 0), datetime(2024, 3, 11, 14, 0, tzinfo=UTC)),  # EST → EDT
        (NY, at(NY, 2024, 11, 1, 10, 0), datetime(2024, 11, 4, 15, 0, tzinfo=UTC)),  # EDT → EST
        (BERLIN, at(BERLIN, 2024, 3, 29, 10, 0), datetime(2024, 4, 1, 8, 0, tzinfo=UTC)),  # CET → CEST
        (BERLIN, at(BERLIN, 2024, 10, 25, 10, 0), datetime(2024, 10, 28, 9, 0, tzinfo=UTC)),  # CEST → CET
    ],
)
def test_day_delays_across_dst_keep_the_local_time(tz, friday, monday_utc):
    assert policy.add_business_days(friday, 1, tz=tz, business_days=[0, 1, 2, 3, 4]) == monday_utc
    plan = make_plan(ladder=[{"step": 0, "channel": "email", "delay_s": 3 * DAY, "delay_business_days": 0}])
    state = policy.initial_state() | {"next_due_at": friday.isoformat()}
    result = policy.plan_next(
        plan, state=state, contact_tz=str(tz), org_tz="UTC", now=friday, event="start", run_id=RUN
    )
    assert result.due_at == monday_utc  # "3d" from Friday 10:00 is Monday 10:00 local


def test_hour_delays_across_dst_are_elapsed_time():
    plan = always_open(None, ladder=[{"step": 0, "channel": "sms", "delay_s": 12 * 3600, "delay_business_days": 0}])
    saturday_night = at(NY, 2024, 3, 9, 20, 0)
    result = policy.plan_next(
        plan,
        state=policy.initial_state(),
        contact_tz="America/New_York",
        org_tz="UTC",
        now=saturday_night,
        event="start",
        run_id=RUN,
    )
    assert result.due_at == at(NY, 2024, 3, 10, 9, 0)  # 12 real hours; the wall clock lost one


def test_add_business_days_landing_in_a_gap_moves_to_the_transition():
    saturday = at(NY, 2024, 3, 9, 2, 30)
    sunday = policy.add_business_days(saturday, 1, tz=NY, business_days=[6])
    assert sunday == datetime(2024, 3, 10, 7, 0, tzinfo=UTC)


# --- time zone and send window --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "fixed", "contact", "org", "expected"),
    [
        ("contact", None, "America/New_York", "Europe/Berlin", "America/New_York"),
        ("contact", None, "", "Europe/Berlin", "Europe/Berlin"),
        ("contact", None, "Mars/Olympus", "Europe/Berlin", "Europe/Berlin"),
        ("organization", None, "America/New_York", "Europe/Berlin", "Europe/Berlin"),
        ("fixed", "Asia/Tokyo", "America/New_York", "Europe/Berlin", "Asia/Tokyo"),
        ("contact", None, "", "", "UTC"),
    ],
)
def test_resolve_timezone(source, fixed, contact, org, expected):
    plan = make_plan(timezone_source=source, timezone=fixed)
    assert policy.resolve_timezone(plan, contact_tz=contact, org_tz=org) == ZoneInfo(expected)


def test_check_send_window_allows_now_or_defers_in_the_contacts_zone():
    plan = make_plan()
    noon_ny = at(NY, 2024, 6, 3, 12, 0)
    assert policy.check_send_window(plan, contact_tz="America/New_York", org_tz="UTC", now=noon_ny, run_id=RUN) is None
    # Noon in New York is 18:00 in Berlin: after hours for a Berlin contact.
    deferred = policy.check_send_window(plan, contact_tz="Europe/Berlin", org_tz="UTC", now=noon_ny, run_id=RUN)
    assert deferred == at(BERLIN, 2024, 6, 4, 9, 0) + OFFSET


# --- per-run offset -------------------------------------------------------------------------------------------------


def test_run_offset_is_stable_bounded_and_spread():
    offsets = [policy.run_offset(run_id).total_seconds() for run_id in range(1, 2001)]
    assert all(0 <= seconds < 300 for seconds in offsets)
    assert len(set(offsets)) > 250
    assert policy.run_offset(RUN) == policy.run_offset(RUN)
    assert policy.run_offset(RUN) == timedelta(seconds=offsets[RUN - 1])


def test_only_moved_wakes_get_the_offset_and_it_differs_between_runs():
    plan, saturday, monday_noon = make_plan(), at(NY, 2024, 6, 1, 10, 0), at(NY, 2024, 6, 3, 12, 0)
    first = policy.next_allowed_instant(plan, at=saturday, tz=NY, run_id=1)
    second = policy.next_allowed_instant(plan, at=saturday, tz=NY, run_id=2)
    assert first != second
    assert first - at(NY, 2024, 6, 3, 9, 0) == policy.run_offset(1)
    assert policy.next_allowed_instant(plan, at=monday_noon, tz=NY, run_id=1) == monday_noon
