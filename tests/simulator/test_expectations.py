"""expectations.check: one reason per unmet expectation, computed from what the run actually did."""

from __future__ import annotations

import functools
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from agents.config import compile_config, validate_source
from agents.models import Organization
from runs.models import Contact, Escalation, OutboxMessage, Run, Task
from simulator import expectations, run_facts

TEMPLATE = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "document-collector.yaml"
NEW_YORK = ZoneInfo("America/New_York")
START = datetime(2029, 12, 31, 9, 0, tzinfo=NEW_YORK)  # a Monday
EMAIL = "vendor.t1@sim.lucia.test"
PHONE = "+15550000001"


@functools.cache
def plan() -> dict:
    return compile_config(validate_source(TEMPLATE.read_text()).config)


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return (START + timedelta(days=day)).replace(hour=hour, minute=minute)


def email(day: int, hour: int = 10, *, episode: int = 1, body: str = "Please send your W-9.",
          recipient: str = EMAIL) -> OutboxMessage:
    return OutboxMessage(idem_key=f"k{day}{hour}{episode}{body}", episode_id=episode, tool="send_email",
                         channel="email", recipient=recipient, payload={"subject": "W-9", "body": body},
                         status="sent", sent_at=at(day, hour))


def facts(*, sent=(), done_on: int | None = None, status: str = "waiting", escalations=(), suppressed=None,
          sandbox_keys=None) -> run_facts.Facts:
    run = Run(pk=1, plan=plan(), status=status, organization=Organization(default_timezone="America/New_York"))
    task = Task(key="collect_w9", required=True, status="done" if done_on is not None else "open",
                done_at=at(done_on, 11) if done_on is not None else None)
    contact = Contact(role="vendor", name="Dana", email=EMAIL, phone=PHONE, timezone="America/New_York")
    return run_facts.Facts(run=run, start=START, contacts=[contact], tasks=[task], sent=list(sent),
                              escalations=list(escalations), suppressed=suppressed or {},
                              sandbox_keys=sandbox_keys or Counter())


def test_a_run_that_meets_everything_has_no_reasons():
    expect = {"tasks_done_by_day": 7, "max_messages": 3, "escalated": False, "final_status": "completed",
              "uses_channels": ["email"], "no_messages_between_days": [1, 2]}

    assert expectations.check(expect, facts(sent=[email(0), email(3, episode=2)], done_on=3,
                                            status="completed")) == []


def test_late_task_names_the_day_it_was_done():
    reasons = expectations.check({"tasks_done_by_day": 7}, facts(done_on=9))

    assert reasons == ["tasks_done_by_day: collect_w9 was not done by day 7 (done on day 9)"]


def test_counts_and_status_each_give_a_reason():
    reasons = expectations.check(
        {"min_messages": 3, "final_status": "completed", "tasks_done": True, "escalated": True},
        facts(sent=[email(0)]),
    )

    assert [reason.split(":")[0] for reason in reasons] == ["tasks_done", "min_messages", "escalated", "final_status"]
    assert "still open: collect_w9" in reasons[0]


def test_unexpected_escalation_says_which_and_when():
    raised = Escalation(kind="stuck", raised_at=at(21, 9))

    assert expectations.check({"escalated": False}, facts(escalations=[raised])) == [
        "escalated: expected no escalation, got 1 (stuck on day 21)"]


def test_messages_inside_a_quiet_window_of_days_are_reported():
    reasons = expectations.check({"no_messages_between_days": [1, 9]}, facts(sent=[email(0), email(3, episode=2)]))

    assert reasons == ["no_messages_between_days: 1 message(s) sent on days 1..9 (email on day 3)"]


def test_days_are_calendar_dates_in_the_start_zone():
    # 23:30 in New York on the start date is already the next day in UTC: still day 0.
    late = email(0, 23)

    assert facts().day(late.sent_at.replace(minute=30)) == 0
    assert facts().day(at(1, 0, 5)) == 1


def test_a_send_in_quiet_hours_is_a_quiet_hours_failure_and_a_policy_violation():
    reasons = expectations.check({}, facts(sent=[email(2, 21)]))

    assert reasons[0] == "no_quiet_hours: 1 message(s) sent in quiet hours (email on day 2)"
    assert "outside the send window" in reasons[1] and reasons[1].startswith("no_policy_violations:")


def test_a_weekend_send_breaks_policy_but_not_quiet_hours():
    reasons = expectations.check({}, facts(sent=[email(5, 11)]))  # Saturday 11:00

    assert len(reasons) == 1 and "Sat 11:00 America/New_York: outside the send window" in reasons[0]


def test_expectation_flags_can_switch_the_invariants_off():
    off = {"no_quiet_hours": False, "no_policy_violations": False, "no_duplicate_sends": False}

    assert expectations.check(off, facts(sent=[email(2, 21), email(2, 21)])) == []


def test_sending_to_an_opted_out_address_after_the_opt_out_is_a_violation():
    suppressed = {("email", EMAIL): at(1, 12)}

    problems = expectations.policy_violations(facts(sent=[email(0), email(3, episode=2)], suppressed=suppressed))

    assert problems == [f"email to {EMAIL} on day 3: the address had opted out or bounced"]


def test_an_address_outside_the_run_is_a_violation():
    problems = expectations.policy_violations(facts(sent=[email(0, recipient="audit@attacker.example")]))

    assert problems == ["email to audit@attacker.example on day 0: not an address of a run contact"]


def test_caps_count_a_rolling_day_and_week():
    sends = [email(0, 10, episode=1), email(0, 11, episode=2), email(0, 12, episode=3)]

    problems = expectations.policy_violations(facts(sent=sends))

    assert problems == [f"to {EMAIL}: 3 messages within 1 day(s), above the per_day cap of 2"]


def test_forbidden_phrases_and_missing_opt_out_text_are_violations():
    sms = OutboxMessage(idem_key="s", episode_id=4, tool="send_sms", channel="sms", recipient=PHONE, status="sent",
                        payload={"body": "We guarantee a quick payment."}, sent_at=at(1, 10))

    problems = expectations.policy_violations(facts(sent=[sms]))

    assert problems == [f"sms to {PHONE} on day 1: contains forbidden phrase(s) 'guarantee'",
                        f"sms to {PHONE} on day 1: the required opt-out text is missing"]


def test_duplicates_in_one_episode_and_keys_sent_twice_are_reported():
    twice = [email(1, episode=5), email(1, episode=5)]

    problems = expectations.duplicate_sends(facts(sent=twice, sandbox_keys=Counter({"abcdef0123456789": 2})))

    assert problems == [f"2 identical email messages to {EMAIL} in one episode",
                        "idempotency key abcdef012345… was sent 2 times"]


def test_the_same_text_in_two_episodes_is_not_a_duplicate():
    assert expectations.duplicate_sends(facts(sent=[email(0, episode=1), email(3, episode=2)])) == []


def test_open_tasks_and_suppression_expectations():
    reasons = expectations.check({"open_tasks": ["collect_w9"], "suppressed": True}, facts(done_on=2))

    assert reasons == ["open_tasks: collect_w9 was expected to stay open but is done",
                       "suppressed: expected a contact address to be suppressed, none is"]
