"""Durations in agent configs: calendar units and business days, and what is refused."""

import pytest

from agents.config import durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0m", (0, 0)),
        (0, (0, 0)),
        ("90s", (90, 0)),
        ("30m", (1800, 0)),
        ("12h", (43200, 0)),
        ("3d", (259200, 0)),
        ("1w", (604800, 0)),
        ("1d12h", (129600, 0)),
        (" 2BD ", (0, 2)),
        ("2bd", (0, 2)),
    ],
)
def test_durations_parse(text, expected):
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["3x", "", "d", "3", 3, -1, "-3d", "3.5d", "bd", "1bd2h", "400d", True, None, []])
def test_durations_refuse(text):
    with pytest.raises(durations.DurationError) as caught:
        durations.parse(text)
    assert caught.value.hint


def test_durations_in_seconds_refuse_business_days():
    assert durations.parse_seconds("2d") == 172800
    with pytest.raises(durations.DurationError):
        durations.parse_seconds("2bd")
