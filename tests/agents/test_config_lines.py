"""Config errors mapped to the lines of the YAML the builder wrote (agents.config.lines)."""

from agents.config import lines, validate_source
from tests.factories import agent_source

SOURCE = agent_source("w9").replace("delay: 2bd\n      channel: email", "delay: 2bd\n      channel: fax")


def line_of(text: str) -> int:
    return SOURCE.splitlines().index(text) + 1


def test_each_validation_error_of_a_config_points_at_its_line():
    result = validate_source(SOURCE.replace("instructions:", "instructons:"))
    found = {error.path: lines.line_for(SOURCE.replace("instructions:", "instructons:"), path=error.path,
                                        message=error.message) for error in result.errors}

    assert found["followup.steps[1].channel"] == line_of("      channel: fax")
    assert found["instructons"] == line_of("instructions: Ask the vendor for their W-9 politely.")


def test_a_missing_key_points_at_the_mapping_that_lacks_it():
    source = "slug: w9\ntasks:\n  - key: w9\n    contact_role: vendor\n"

    assert lines.line_for(source, path="tasks[0].title") == 3
    assert lines.line_for(source, path="capabilities") is None  # nothing to point at: add it anywhere


def test_yaml_syntax_errors_point_at_the_line_in_their_message():
    result = validate_source("slug: w9\nname: a\nname: b\n")
    error = result.errors[0]

    assert lines.line_for("", path=error.path, message=error.message) == 3


def test_paths_parse_like_format_path_writes_them():
    assert lines.parse_path('followup.steps[2]["odd key"].x') == ["followup", "steps", 2, "odd key", "x"]
    assert lines.parse_path("<root>") is None
