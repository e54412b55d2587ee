"""Builders' patterns: RE2 at validation and at run time, over bounded text, so no pattern can stall a worker."""

import time

import pytest

from agents.config import patterns
from runs import evidence
from runs.llm import scripted_intents
from tests.agents.config_helpers import minimal, only_error, validate

CATASTROPHIC = "^(a+)+$"
# Python's backtracking `re` takes 2^n steps on this for ^(a+)+$; RE2 is linear.
HOSTILE_TEXT = "a" * 10_000 + "b"  # within the scanned part


def test_a_catastrophic_pattern_is_valid_config_and_matches_in_linear_time():
    data = minimal()
    data["tasks"][0]["done_when"] = {"type": "reply_matches", "pattern": CATASTROPHIC}
    assert validate(data).ok

    started = time.perf_counter()
    result = evidence.check(data["tasks"][0]["done_when"], evidence={"messages": [
        {"source": "episode:1", "kind": "reply", "text": HOSTILE_TEXT, "attachments": [], "fields": {}}]})
    claimed = scripted_intents.may_prove(data["tasks"][0]["done_when"], kind="inbound", text=HOSTILE_TEXT,
                                         attachments=[], fields={})

    assert (result.passed, claimed) == (False, False)
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize("pattern", [r"(?<!not )w-?9", r"(?=w)w9", r"(w)\1", "a{1000}{1000}"])
def test_patterns_re2_cannot_run_are_refused_at_their_path_with_the_syntax_hint(pattern):
    data = minimal()
    data["tasks"][0]["done_when"]["filename_pattern"] = pattern

    error = only_error(validate(data))

    assert error.path == "tasks[0].done_when.filename_pattern"
    assert "invalid regular expression" in error.message
    assert "RE2 syntax" in error.hint


def test_patterns_scan_only_the_first_configured_characters(settings):
    settings.LUCIA_PATTERN_SCAN_CHARS = 100
    reply = {"type": "reply_matches", "pattern": "(?i)w-?9 attached"}
    early = "W9 attached" + "." * 200
    late = "." * 200 + "W9 attached"

    def passes(text: str) -> bool:
        message = {"source": "episode:1", "kind": "reply", "text": text, "attachments": [], "fields": {},
                   "from_roles": ["vendor"]}
        return evidence.check(reply, evidence={"messages": [message]}, contact_role="vendor").passed

    assert (passes(early), passes(late)) == (True, False)
    assert patterns.bounded(late) == "." * 100


def test_a_stored_pattern_re2_refuses_fails_the_check_instead_of_raising():
    # Versions published before validation used RE2 may still hold one.
    result = evidence.check({"type": "reply_matches", "pattern": "(?<=a)b"}, evidence={"messages": [
        {"source": "episode:1", "kind": "reply", "text": "ab", "attachments": [], "fields": {}}]})

    assert not result.passed
    assert "cannot be used" in result.reason
