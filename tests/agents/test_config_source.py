"""Config YAML that is not a config: syntax errors, wrong shapes, odd keys, aliases, control characters. Each is
an error with its path, never an exception (agents/config/source.py)."""

from __future__ import annotations

import copy

import pytest

from agents import config
from tests.agents.config_helpers import locations, minimal, only_error, set_at, validate


def test_yaml_syntax_error_gives_line_and_column():
    result = config.validate_source("slug: a\nname: b\ncapabilities: [email\ninstructions: x\n")

    error = only_error(result)

    assert error.path == "<yaml>"
    assert "line 4" in error.message and "column" in error.message


def test_duplicate_yaml_key_is_a_syntax_error():
    error = only_error(config.validate_source("slug: a\nname: b\nslug: c\n"))

    assert error.path == "<yaml>"
    assert "duplicate key 'slug'" in error.message
    assert "line 3" in error.message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just words", "42", "[1, 2]"])
def test_non_mapping_top_level_is_one_root_error(text):
    error = only_error(config.validate_source(text))

    assert error.path == "<root>"
    assert "mapping" in error.message


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "~"])
def test_empty_source_is_one_root_error(text):
    assert only_error(config.validate_source(text)).path == "<root>"


@pytest.mark.parametrize(
    "patch",
    [
        {"tasks": "collect it"},
        {"tasks": [1, None, "x"]},
        {"followup": []},
        {"followup": {"steps": "often"}},
        {"followup": {"steps": [None, {"delay": [], "channel": {}}]}},
        {"contacts": [{"role": ["vendor"], "channels": "email"}]},
        {"capabilities": "email"},
        {"tools": {"send_email": True}},
        {"compliance": {"opt_out_text": ["sms"], "quiet_hours": "night"}},
        {"model": {"scripted": "be nice"}},
        {"model": {"scripted": {"messages": {"first": "hi"}, "tasks": []}}},
        {"evals": [{"personas": [1], "expect": None}]},
        {"evals": [{"personas": {"vendor": {"traits": [{"type": 3}]}}, "expect": {}}]},
        {"inputs": "many"},
    ],
)
def test_wrong_shapes_are_errors_not_exceptions(patch):
    data = minimal() | patch

    result = validate(data)

    assert not result.ok
    assert all(str(error).startswith(f"{error.path}: ") for error in result.errors)


def test_any_node_replaced_by_any_type_gives_errors_with_hints_not_exceptions():
    data = minimal()
    for loc in locations(data):
        for junk in (None, 0, "x", [], {}, True):
            broken = copy.deepcopy(data)
            set_at(broken, loc=loc, value=junk)
            result = config.validate_data(broken)
            assert result.ok or all(error.path and error.message and error.hint for error in result.errors), loc


@pytest.mark.parametrize(
    ("text", "path", "kind"),
    [
        ("? [a, b]\n: 1\nslug: x\n", "<root>", "list"),
        ("slug: x\nfollowup:\n  steps:\n    - ? {a: b}\n      : 1\n", "followup.steps[0]", "mapping"),
        ("slug: x\nname: {? [1, 2]: y}\n", "name", "list"),
    ],
)
def test_a_list_or_mapping_key_is_an_error_at_its_path(text, path, kind):
    error = only_error(config.validate_source(text))

    assert error.path == path
    assert f"a key must be plain text, not a {kind}" in error.message
    assert "quote" in error.hint


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [*a]\n",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True)),
    ],
)
def test_aliases_that_expand_past_the_limit_are_one_error(text):
    error = only_error(config.validate_source(text))

    assert "expands to more than" in error.message
    assert "aliases" in error.hint


def test_control_characters_are_a_yaml_error_not_an_exception():
    assert only_error(config.validate_source("slug: a\x19b\n")).path == "<yaml>"


