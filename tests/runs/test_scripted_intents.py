"""Reading replies (the scripted model's intents, addresses, dates) costs time linear in a bounded text."""

import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from runs import guardrails
from runs.llm import scripted_intents

# One word of a megabyte: a backtracking address pattern retried at each letter takes hours on it.
HOSTILE = "a" * 1_000_000


def test_a_megabyte_reply_is_read_in_bounded_time():
    started = time.perf_counter()
    scripted_intents.classify(HOSTILE)
    scripted_intents.requested_channel(HOSTILE)
    scripted_intents.parse_availability(HOSTILE, now=datetime(2026, 3, 2, tzinfo=UTC))
    found = scripted_intents.new_addresses(HOSTILE + " ada@example.com", known=set())
    guardrails.EMAIL.findall(HOSTILE)

    assert found == []  # the address lies past the scanned part
    assert time.perf_counter() - started < 2


def test_addresses_are_still_found_where_they_start():
    text = "Write to ada@example.com or bob.x+1@mail.co.uk (cc:joe@x.org.), call +1 415 555 0100."
    assert scripted_intents.new_addresses(text, known={"joe@x.org"}) == [
        "ada@example.com", "bob.x+1@mail.co.uk", "14155550100",
    ]
    assert guardrails.EMAIL.findall(text) == ["ada@example.com", "bob.x+1@mail.co.uk", "joe@x.org"]


@pytest.mark.parametrize(("text", "intent"), [
    ("Stop harassing me or I will sue.", "legal_threat"),
    ("Stop contacting me, my lawyer will be in touch.", "legal_threat"),
    ("STOP", "opt_out"),
    ("Please stop contacting me.", "opt_out"),
    ("Wrong number, who is this?", "wrong_person"),
    ("Please email me instead.", "channel_request"),
    ("All on track.", "status_update"),
    ("Everything is going well, no issues.", "status_update"),
    ("We will pay on the 15th.", "promise"),
    ("Payment goes out next Friday.", "promise"),
    ("We will pay soon.", "acknowledgement"),
    ("I already sent it.", "claim_done"),
    ("I'm not available for 2 weeks.", "out_of_office"),
])
def test_everyday_replies_are_classified_with_the_rule_that_fired(text, intent):
    found, rule = scripted_intents.classify_with_rule(text)
    assert found == intent
    assert rule and rule != "no_rule"


def test_unclassified_text_names_no_rule():
    assert scripted_intents.classify_with_rule("asdf qwerty") == ("unclassified", "no_rule")


def test_dates_are_read_in_the_contacts_zone():
    # 02:00 UTC on the 15th is still the 14th in Chicago: "the 15th" is tomorrow there, not today.
    now = datetime(2030, 1, 15, 2, 0, tzinfo=UTC)
    assert scripted_intents.parse_availability("back on the 15th", now=now, tz=ZoneInfo("America/Chicago")) == {
        "at": "2030-01-15", "rule": "ordinal_day"}
    assert scripted_intents.parse_availability("back on the 14th", now=now, tz=ZoneInfo("America/Chicago")) == {
        "at": "2030-01-14", "rule": "ordinal_day"}
    assert scripted_intents.parse_availability("back on the 14th", now=now)["at"] == "2030-02-14"
    assert scripted_intents.parse_availability("call me in 3 days", now=now) == {"delay_s": 3 * 86400,
                                                                               "rule": "relative"}
