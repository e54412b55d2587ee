"""Dates as people write them (runs.llm.dates): pure functions, a fixed "today" in the writer's zone."""

from __future__ import annotations

from datetime import date

import pytest

from runs.llm import dates

# Monday 31 December 2029, the simulator's default start.
TODAY = date(2029, 12, 31)


@pytest.mark.parametrize(("text", "expected", "rule"), [
    ("We will pay on the 15th.", date(2030, 1, 15), "ordinal_day"),
    ("Out until the 10th", date(2030, 1, 10), "ordinal_day"),
    ("next Friday works", date(2030, 1, 4), "weekday"),
    ("I'll send it Friday", date(2030, 1, 4), "weekday"),
    ("back in 2 weeks", date(2030, 1, 14), "relative"),
    ("in a couple of days", date(2030, 1, 2), "relative"),
    ("in 5 business days", date(2030, 1, 7), "relative"),
    ("in a month", date(2030, 1, 31), "relative"),
    ("not available for 2 weeks", date(2030, 1, 14), "absence_length"),
    ("two weeks off from tomorrow", date(2030, 1, 14), "absence_length"),
    ("Jan 10", date(2030, 1, 10), "month_day"),
    ("on vacation until January 12th", date(2030, 1, 12), "month_day"),
    ("by 15 March 2030", date(2030, 3, 15), "day_month"),
    ("pay on 2030-03-15", date(2030, 3, 15), "iso_date"),
    ("3/15/2030", date(2030, 3, 15), "numeric_date"),
    ("tomorrow", date(2030, 1, 1), "tomorrow"),
    ("today", TODAY, "today"),
    ("by the end of the week", date(2030, 1, 4), "end_of_week"),
    ("end of the month", TODAY, "end_of_month"),
    ("next week", date(2030, 1, 7), "next_week"),
])
def test_find_reads_the_date_people_mean(text, expected, rule):
    found = dates.find(text, today=TODAY)
    assert (found.day, found.rule) == (expected, rule)


def test_a_date_without_a_year_is_the_next_one_from_today():
    assert dates.find("Dec 30", today=TODAY).day == date(2030, 12, 30)
    assert dates.find("Dec 31", today=TODAY).day == TODAY
    # The 31st of a 30-day month is skipped for the next month that has one.
    assert dates.find("the 31st", today=date(2030, 4, 2)).day == date(2030, 5, 31)
    assert dates.find("the 2nd", today=date(2030, 4, 3)).day == date(2030, 5, 2)


def test_the_earliest_phrase_in_the_text_wins():
    assert dates.find("until the 10th, then in 3 weeks again", today=TODAY).day == date(2030, 1, 10)


def test_relative_phrasings_keep_their_distance():
    assert dates.find("in 3 days", today=TODAY).days_ahead == 3
    assert dates.find("the 15th", today=TODAY).days_ahead is None


@pytest.mark.parametrize("text", ["All on track.", "sure", "in 900 days", "the 45th", "2030-02-30", "Saturday night"
                                  " is not a weekday name alone: sat", ""])
def test_find_returns_none_or_a_valid_date(text):
    found = dates.find(text, today=TODAY)
    assert found is None or (found.day >= TODAY and found.rule)


def test_no_date_in_plain_text():
    assert dates.find("All on track.", today=TODAY) is None
    assert dates.find("the 45th", today=TODAY) is None
    assert dates.find("in 900 days", today=TODAY) is None


def test_add_business_days_skips_weekends():
    assert dates.add_business_days(date(2030, 1, 4), 1) == date(2030, 1, 7)
    assert dates.add_business_days(TODAY, 0) == TODAY
