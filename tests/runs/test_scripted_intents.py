"""Reading replies (the scripted model's intents, addresses, dates) costs time linear in a bounded text."""

import time
from datetime import UTC, datetime

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
