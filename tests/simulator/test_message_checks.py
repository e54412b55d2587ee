"""Counts in day ranges and periods, quiet periods and content, with chasing apart from acknowledgements."""

from __future__ import annotations

from runs.models import Episode, Escalation
from simulator import expectations, run_facts
from tests.simulator.test_expectations import at, email, facts


def chase(day: int, hour: int = 10, body: str = "Please send your W-9.") -> object:
    message = email(day, hour, episode=day * 100 + hour, body=body)
    message.episode_kind = "followup"
    return message


def ack(day: int, hour: int = 11, body: str = "Thanks for your reply.") -> object:
    message = email(day, hour, episode=day * 100 + hour, body=body)
    message.episode_kind = "inbound"
    return message


def with_episodes(base, *episodes) -> run_facts.Facts:
    base.episodes = list(episodes)
    return base


def test_counts_in_a_day_range_count_chasing_apart_from_acknowledgements():
    sent = [chase(0), ack(1), chase(3), ack(3)]
    expect = {"messages": [{"days": [0, 3], "kind": "chasing", "max": 1},
                           {"kind": "acknowledgement", "min": 3},
                           {"days": [1, 2], "max": 1}]}

    assert expectations.check(expect, facts(sent=sent)) == [
        "messages: 2 chasing message(s) on days 0..3, expected at most 1 (email on day 0, email on day 3)",
        "messages: 2 acknowledgement(s) in the whole run, expected at least 3 (email on day 1, email on day 3)",
    ]


def test_per_period_checks_every_whole_period_up_to_the_last_day():
    base = facts(sent=[chase(0), chase(2), chase(8), ack(9)])
    base.last_day = 20  # periods 0..6 and 7..13 and 14..20

    reasons = expectations.check({"per_period": [{"days": 7, "min": 1, "max": 1}]}, base)

    assert reasons == [
        "per_period: 2 chasing message(s) on days 0..6, expected at most 1 (email on day 0, email on day 2)",
        "per_period: 0 chasing message(s) on days 14..20, expected at least 1"]


def test_quiet_after_the_first_reply_names_what_broke_the_silence():
    reply = Episode(kind="inbound", status="done", due_at=at(1, 12))
    base = with_episodes(facts(sent=[chase(0), ack(1, 13), chase(7), chase(16)]), reply)

    assert expectations.check({"quiet_after": [{"event": "first_reply", "days": 14, "kind": "chasing"}]}, base) == [
        "quiet_after: 1 chasing message(s) within 14 day(s) after the first reply on day 1 (email on day 7)"]
    # Nothing happened, nothing to be quiet after.
    assert expectations.check({"quiet_after": [{"event": "escalation", "days": 3}]}, base) == []


def test_quiet_after_an_escalation():
    base = facts(sent=[chase(0), chase(22)], escalations=[Escalation(kind="stuck", raised_at=at(21, 9))])

    assert expectations.check({"quiet_after": [{"event": "escalation", "days": 7}]}, base) == [
        "quiet_after: 1 message(s) within 7 day(s) after the escalation on day 21 (email on day 22)"]


def test_content_must_and_must_not_contain_within_a_kind():
    sent = [chase(0, body="Please send your W-9."), ack(2, body="We have not received it; could you attach it again?")]
    expect = {"content": [{"contains": "ATTACH IT AGAIN", "kind": "acknowledgement"},
                          {"contains": "attach it again", "kind": "chasing"},
                          {"not_contains": "w-9", "days": [0, 1]}]}

    assert expectations.check(expect, facts(sent=sent)) == [
        "content: no chasing message(s) contains 'attach it again' (1 checked)",
        "content: 1 message(s) on days 0..1 contain(s) 'w-9' (email on day 0)",
    ]
