"""Validation of when an agent may send: time zones, quiet and business hours, cadence and holiday calendars."""

from __future__ import annotations

import pytest
import yaml

from agents import config
from tests.agents.config_helpers import minimal, only_error, validate


def test_unknown_timezone_suggests_a_real_one():
    data = minimal()
    data["followup"] |= {"timezone_source": "fixed", "timezone": "Europe/Pariss"}

    error = only_error(validate(data))

    assert error.path == "followup.timezone"
    assert error.hint == "did you mean Europe/Paris?"


def test_fixed_timezone_source_needs_a_timezone():
    data = minimal()
    data["followup"]["timezone_source"] = "fixed"

    assert only_error(validate(data)).path == "followup.timezone"


@pytest.mark.parametrize(
    ("quiet_hours", "path"),
    [
        ({"start": "25:00", "end": "08:00"}, "compliance.quiet_hours.start"),
        ({"start": "20:00", "end": "20:00"}, "compliance.quiet_hours"),
        ({"start": "20:00"}, "compliance.quiet_hours.end"),
        ({"start": 1200, "end": "08:00"}, "compliance.quiet_hours.start"),
    ],
)
def test_malformed_quiet_hours(quiet_hours, path):
    data = minimal()
    data["compliance"]["quiet_hours"] = quiet_hours

    assert only_error(validate(data)).path == path


def test_unquoted_clock_times_and_norwegian_stay_strings():
    # YAML 1.1 would read 17:00 as the integer 1020 and `no` as false.
    data = minimal()
    data["followup"]["business_hours"] = "HOURS"
    data["evals"][0]["personas"]["vendor"]["traits"] = [{"type": "language", "code": "LANG"}]
    text = yaml.safe_dump(data, sort_keys=False).replace("HOURS", "{start: 09:00, end: 17:00}").replace("LANG", "no")

    result = config.validate_source(text)

    assert result.ok, [str(e) for e in result.errors]
    assert result.config.followup.business_hours.end == "17:00"
    assert result.config.evals[0].personas["vendor"].traits[0].code == "no"


def test_cadence_and_holidays_compile_to_the_plan():
    data = minimal()
    data["followup"]["holidays"] = ["contact", "DE"]
    data["cadence"] = {"every": "1w", "on": "mon", "at": "10:00", "until": "8w"}
    result = validate(data)
    assert result.ok, result.as_dict()
    plan = config.compile_config(result.config)
    assert plan["followup"]["holidays"] == ["DE", "contact"]
    assert plan["cadence"] == {"every_s": 7 * 86400, "on": 0, "at": "10:00", "until_date": None,
                               "until_s": 8 * 7 * 86400, "escalate_after": 3}
    assert config.compile_config(validate(minimal()).config)["cadence"] is None


@pytest.mark.parametrize(("cadence", "path", "hint"), [
    ({"every": "10d", "on": "mon"}, "cadence", "use every: 1w"),
    ({"every": "12h"}, "cadence.every", "at most once a day"),
    ({"every": "1w", "until": "soon"}, "cadence.until", "2030-06-30"),
    ({"every": "1w", "on": "monday"}, "cadence.on", "mon"),
    ({"every": "1w", "at": "07:30"}, "cadence.at", 'at: "09:00"'),
])
def test_cadence_errors_name_their_path_and_how_to_fix_them(cadence, path, hint):
    data = minimal()
    data["cadence"] = cadence
    errors = validate(data).errors
    assert any(e.path == path and hint in (e.hint + e.message) for e in errors), [str(e) for e in errors]


@pytest.mark.parametrize(("business", "quiet"), [
    ({"start": "09:00", "end": "17:00"}, {"start": "08:00", "end": "18:00"}),
    ({"start": "06:00", "end": "07:30"}, {"start": "20:00", "end": "08:00"}),  # the morning part of a wrap
    ({"start": "21:00", "end": "23:00"}, {"start": "20:00", "end": "08:00"}),  # its evening part
])
def test_business_hours_inside_quiet_hours_are_refused_as_leaving_no_time_to_send(business, quiet):
    data = minimal()
    data["followup"]["business_hours"] = business
    data["compliance"]["quiet_hours"] = quiet

    error = only_error(validate(data))

    assert error.path == "followup.business_hours" and "nothing could ever be sent" in error.message
    assert "quiet" in error.hint


@pytest.mark.parametrize(("business", "quiet"), [
    ({"start": "07:00", "end": "09:00"}, {"start": "20:00", "end": "08:00"}),  # 08:00-09:00 is left
    ({"start": "09:00", "end": "17:00"}, None),
    ({"start": "09:00", "end": "17:00"}, {"start": "12:00", "end": "13:00"}),
])
def test_business_hours_that_leave_time_outside_quiet_hours_are_accepted(business, quiet):
    data = minimal()
    data["followup"]["business_hours"] = business
    data["compliance"]["quiet_hours"] = quiet

    assert validate(data).ok, validate(data).as_dict()


def test_an_unknown_holiday_calendar_is_refused_with_a_suggestion():
    data = minimal()
    data["followup"]["holidays"] = ["GB", "XQ"]
    errors = validate(data).errors
    assert [e.path for e in errors] == ["followup.holidays"]
    assert "'XQ'" in errors[0].message and "contact" in errors[0].hint
