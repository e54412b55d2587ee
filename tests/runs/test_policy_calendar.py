"""Send windows: business days and hours, quiet hours, DST, time zones and the per-run offset
(runs/policy/calendar.py, runs/policy/window.py). Pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runs import policy
from tests.runs.policy_helpers import BERLIN, DAY, NY, OFFSET, RUN, always_open, at, make_plan, step

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
