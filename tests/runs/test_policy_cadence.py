"""Cadence: one check-in per period at its slot (business-day and holiday aware), a reply serves its period,
the ladder chases a check-in only until the next one, and silence spends the cadence after escalate_after."""

from __future__ import annotations

from datetime import date, timedelta
from zoneinfo import ZoneInfo

from runs import policy
from runs.policy import cadence as cadence_policy
from tests.runs.policy_helpers import RUN, at, make_plan, step

NY = ZoneInfo("America/New_York")
WEEKLY = {"every_s": 7 * 86400, "on": 0, "at": "10:00", "until_date": None, "until_s": None, "escalate_after": 3}


def weekly_plan(**cadence) -> dict:
    plan = make_plan(ladder=[{"step": 0, "channel": "slack", "delay_s": 0, "delay_business_days": 0},
                             {"step": 1, "channel": "email", "delay_s": 0, "delay_business_days": 2}],
                     max_attempts=2, holidays=["contact"], quiet=None)
    return plan | {"cadence": WEEKLY | cadence}


def _local(value) -> tuple:
    local = value.astimezone(NY)
    return local.strftime("%a"), local.date(), (local.hour, local.minute)


def test_check_ins_stay_on_mondays_when_every_one_is_answered():
    plan, state = weekly_plan(), {}
    now = at(NY, 2030, 1, 7, 10, 0)  # Monday
    result, state = step(plan, state, now, "start", outreach_sent=True)
    check_ins = []
    for _week in range(4):
        # The lead answers two days after each check-in: the next check-in is the next Monday, not reply + 7 days.
        reply_at = now + timedelta(days=2, hours=3)
        result, state = step(plan, state, reply_at, "reply", outreach_sent=True)
        assert result.action == "followup" and result.step == 0 and result.channel == "slack"
        now = result.due_at
        check_ins.append(_local(now)[0])
        result, state = step(plan, state, now, "followup", outreach_sent=True)
    assert check_ins == ["Mon", "Tue", "Mon", "Mon"]  # 21 Jan 2030 is Martin Luther King Jr. Day
    assert _local(now)[1] == date(2030, 2, 4)


def test_an_unanswered_check_in_is_chased_once_then_the_next_monday_checks_in_again():
    plan, state = weekly_plan(), {}
    result, state = step(plan, state, at(NY, 2030, 1, 7, 10, 0), "start", outreach_sent=True)
    assert (result.step, result.channel, _local(result.due_at)[1]) == (1, "email", date(2030, 1, 9))
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)
    assert (result.step, _local(result.due_at)) == (0, ("Mon", date(2030, 1, 14), (10, 0)))


def test_an_update_before_the_slot_serves_that_week_so_there_is_no_check_in_until_the_next_one():
    plan, state = weekly_plan(), {}
    result, state = step(plan, state, at(NY, 2030, 1, 7, 10, 0), "start", outreach_sent=True)
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)  # Wednesday's nudge
    # Monday 14 January, 08:30, before the 10:00 slot: the lead writes first.
    result, state = step(plan, state, at(NY, 2030, 1, 14, 8, 30), "reply", outreach_sent=False)
    assert _local(result.due_at)[1] == date(2030, 1, 22)  # the next week's slot (Monday 21st is a holiday)


def test_a_check_in_due_on_new_years_day_moves_to_the_next_business_day():
    plan, state = weekly_plan(on=1), {}  # Tuesdays; 1 January 2030 is a Tuesday
    result, state = step(plan, state, at(NY, 2029, 12, 26, 11, 0), "start", outreach_sent=True)
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)
    assert _local(result.due_at) == ("Wed", date(2030, 1, 2), (10, 0))


def test_three_unanswered_check_ins_spend_the_cadence_and_escalate_once():
    plan, state = weekly_plan(), {}
    result, state = step(plan, state, at(NY, 2030, 1, 7, 10, 0), "start", outreach_sent=True)
    actions = []
    for _ in range(12):
        if result.action != "followup":
            break
        result, state = step(plan, state, result.due_at, "followup", outreach_sent=result.step is not None)
        actions.append((result.action, result.step))
    assert actions[-1][0] == "escalate"
    assert state["cadence"]["unanswered"] == 3 and state["exhausted"] is True
    result, state = step(plan, state, at(NY, 2030, 3, 4, 10, 0), "followup")
    assert result.action == "idle"


def test_no_check_in_after_until():
    plan, state = weekly_plan(until_date="2030-01-20"), {}
    result, state = step(plan, state, at(NY, 2030, 1, 7, 10, 0), "start", outreach_sent=True)
    result, state = step(plan, state, at(NY, 2030, 1, 8, 10, 0), "reply")
    assert result.action == "followup" and _local(result.due_at)[1] == date(2030, 1, 14)
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)
    result, state = step(plan, state, at(NY, 2030, 1, 15, 10, 0), "reply")
    # The next slot (22 January) is past `until`: no check-in is scheduled, the ladder alone decides.
    assert state["cadence"]["slot"] is None
    assert result.due_at is None or _local(result.due_at)[1] < date(2030, 1, 22)


def test_a_plan_without_cadence_is_the_plain_ladder():
    plan = make_plan()
    now = at(NY, 2030, 1, 7, 10, 0)
    with_wrapper = policy.plan_next(plan, state={}, contact_tz="America/New_York", org_tz="UTC", now=now,
                                    event="start", run_id=RUN, outreach_sent=True)
    assert with_wrapper.step == 1 and "cadence" not in with_wrapper.state_updates


def test_public_holidays_are_not_business_days_for_ladder_steps_and_sends():
    plan = make_plan(holidays=["contact"], quiet=None)
    friday = at(NY, 2029, 12, 28, 10, 0)
    result, _ = step(plan, {}, friday, "start", outreach_sent=True)
    assert _local(result.due_at)[1] == date(2030, 1, 2)  # 2bd: Monday 31st, then Wednesday (1 January skipped)
    opening = policy.next_allowed_instant(plan, at=at(NY, 2030, 1, 1, 11, 0), tz=NY, run_id=RUN)
    assert _local(opening)[:2] == ("Wed", date(2030, 1, 2))
    plain = make_plan(quiet=None)
    assert policy.next_allowed_instant(plain, at=at(NY, 2030, 1, 1, 11, 0), tz=NY, run_id=RUN) \
        == at(NY, 2030, 1, 1, 11, 0)


def test_the_contact_calendar_follows_the_contact_timezone_and_fixed_codes_add_theirs():
    from runs.policy import public_holidays

    assert public_holidays.zone_country("Europe/London") == "GB"
    assert public_holidays.zone_country("UTC") is None
    plan = make_plan(holidays=["contact", "DE"])
    assert public_holidays.countries_for(plan, zone_name="America/New_York") == ("US", "DE")
    # 3 October (German Unity Day) is closed for a New York contact only because DE is listed.
    closed = public_holidays.closed_days(plan, zone_name="America/New_York")
    assert closed(date(2030, 10, 3)) and closed(date(2030, 7, 4)) and not closed(date(2030, 10, 2))


def test_the_slot_of_a_period_is_its_first_business_day():
    plan = weekly_plan()
    slot = cadence_policy.slot_for(plan, date(2030, 1, 21), tz=NY, run_id=RUN)
    assert _local(slot) == ("Tue", date(2030, 1, 22), (10, 0))


def test_a_reply_asking_for_a_later_contact_is_no_update_the_check_in_comes_then():
    plan, state = weekly_plan(), {}
    result, state = step(plan, state, at(NY, 2030, 1, 7, 10, 0), "start", outreach_sent=True)
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)  # Wednesday's nudge
    # Monday the 14th before the slot: "busy this week, ask me on Thursday". Not this week's update: the
    # check-in goes on Thursday (not Monday, not the next Monday).
    result, state = step(plan, state, at(NY, 2030, 1, 14, 8, 30), "reply", defer_until=at(NY, 2030, 1, 17, 10, 0))
    assert (result.step, _local(result.due_at)[1]) == (0, date(2030, 1, 17))
    result, state = step(plan, state, result.due_at, "followup", outreach_sent=True)
    assert state["cadence"]["served"] == "2030-01-14"
