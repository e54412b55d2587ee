"""Validation of agent config YAML: exact error paths, every error at once, never a traceback."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import yaml

from agents import config


def minimal() -> dict:
    """A small valid config; tests break one thing at a time."""
    return {
        "slug": "w9-collector",
        "name": "W-9 collector",
        "capabilities": ["email", "sms"],
        "instructions": "Collect a signed W-9.",
        "contacts": [{"role": "vendor", "channels": ["email", "sms"]}],
        "tasks": [
            {
                "key": "collect_w9",
                "title": "Signed W-9 received",
                "contact_role": "vendor",
                "done_when": {"type": "attachment_received", "filename_pattern": "(?i)w-?9"},
            }
        ],
        "followup": {
            "steps": [
                {"delay": "0m", "channel": "email"},
                {"delay": "3bd", "channel": "email"},
                {"delay": "2bd", "channel": "sms"},
            ]
        },
        "compliance": {"opt_out_text": {"sms": "Reply STOP to opt out."}},
        "model": {
            "provider": "scripted",
            "scripted": {
                "messages": {
                    "first": {"subject": "W-9 for {org.name}", "body": "Hi {contact.first_name}, please send it."},
                    "followup": {"body": "A reminder about the W-9.", "short": "W-9 reminder from {org.name}."},
                }
            },
        },
        "evals": [
            {
                "name": "silent",
                "personas": {"vendor": {"traits": [{"type": "silent"}]}},
                "expect": {"escalated": True},
            }
        ],
    }


def validate(data: dict) -> config.ValidationResult:
    return config.validate_source(yaml.safe_dump(data, sort_keys=False))


def paths(result: config.ValidationResult) -> list[str]:
    return [error.path for error in result.errors]


def only_error(result: config.ValidationResult) -> config.ConfigError:
    assert len(result.errors) == 1, [str(e) for e in result.errors]
    return result.errors[0]


def test_minimal_config_is_valid_and_carries_the_model():
    result = validate(minimal())

    assert result.ok, [str(e) for e in result.errors]
    assert isinstance(result.config, config.AgentConfig)
    assert result.config.slug == "w9-collector"


def test_step_channel_outside_capabilities_is_reported_at_the_step():
    data = minimal()
    data["followup"]["steps"][2]["channel"] = "slack"

    error = only_error(validate(data))

    assert error.path == "followup.steps[2].channel"
    assert "capabilities" in error.message
    assert "slack" in error.hint


def test_unknown_channel_hint_lists_the_channels():
    data = minimal()
    data["followup"]["steps"][1]["channel"] = "fax"

    error = only_error(validate(data))

    assert error.path == "followup.steps[1].channel"
    assert error.hint == "use one of: email, sms, slack, voice"


def test_invalid_regex_is_reported_at_the_pattern():
    data = minimal()
    data["tasks"][0]["done_when"]["filename_pattern"] = "(?i)w-?9("

    error = only_error(validate(data))

    assert error.path == "tasks[0].done_when.filename_pattern"
    assert "regular expression" in error.message


def test_bad_duration_is_reported_at_the_delay_with_a_format_hint():
    data = minimal()
    data["followup"]["steps"][1]["delay"] = "3x"

    error = only_error(validate(data))

    assert error.path == "followup.steps[1].delay"
    assert "3d" in error.hint and "2bd" in error.hint


def test_business_days_are_refused_where_only_seconds_make_sense():
    data = minimal()
    data["followup"]["reply_grace"] = "2bd"

    assert only_error(validate(data)).path == "followup.reply_grace"


def test_missing_required_field_names_it():
    data = minimal()
    del data["instructions"]

    error = only_error(validate(data))

    assert error.path == "instructions"
    assert error.message == "instructions is required"
    assert "instructions" in error.hint


def test_unknown_key_is_an_error_with_the_closest_valid_key():
    data = minimal()
    data["followup"]["max_attemps"] = 3

    error = only_error(validate(data))

    assert error.path == "followup.max_attemps"
    assert error.message == "unknown key 'max_attemps'"
    assert "max_attempts" in error.hint


def test_unknown_key_inside_a_tagged_union_gets_the_members_keys():
    data = minimal()
    data["tasks"][0]["done_when"]["content_typs"] = ["application/pdf"]

    error = only_error(validate(data))

    assert error.path == "tasks[0].done_when.content_typs"
    assert "content_types" in error.hint


def test_unknown_key_far_from_any_valid_key_lists_the_valid_keys():
    data = minimal()
    data["contacts"][0]["zzz"] = 1

    error = only_error(validate(data))

    assert error.hint == "remove it; valid keys here: channels, required, role"


def test_missing_done_when_type_lists_the_types():
    data = minimal()
    data["tasks"][0]["done_when"] = {"pattern": "x"}

    error = only_error(validate(data))

    assert error.path == "tasks[0].done_when"
    assert "attachment_received" in error.hint and "human_confirmation" in error.hint


def test_every_error_is_reported_at_once():
    data = minimal()
    data["slug"] = "Not A Slug"
    data["followup"]["steps"][1]["delay"] = "3x"
    data["followup"]["steps"][2]["channel"] = "slack"
    data["tasks"][0]["done_when"]["filename_pattern"] = "("
    data["tasks"][0]["contact_role"] = "vendr"
    data["evals"][0]["personas"]["ghost"] = {"traits": []}

    result = validate(data)

    assert not result.ok
    assert result.config is None
    assert set(paths(result)) == {
        "slug",
        "followup.steps[1].delay",
        "followup.steps[2].channel",
        "tasks[0].done_when.filename_pattern",
        "tasks[0].contact_role",
        "evals[0].personas.ghost",
    }


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
    for loc in _locations(data):
        for junk in (None, 0, "x", [], {}, True):
            broken = copy.deepcopy(data)
            _set(broken, loc=loc, value=junk)
            result = config.validate_data(broken)
            assert result.ok or all(error.path and error.message and error.hint for error in result.errors), loc


def _locations(node: object, *, prefix: tuple = ()) -> Iterator[tuple]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from _locations(child, prefix=(*prefix, key))


def _set(node: object, *, loc: tuple, value: object) -> None:
    for key in loc[:-1]:
        node = node[key]
    node[loc[-1]] = value


def test_send_tool_without_its_capability():
    data = minimal()
    data["tools"] = ["send_email", "send_sms", "place_call", "finish"]

    error = only_error(validate(data))

    assert error.path == "tools[2]"
    assert "voice" in error.message


def test_ladder_step_needs_its_send_tool():
    data = minimal()
    data["tools"] = ["send_email", "finish"]

    error = only_error(validate(data))

    assert error.path == "followup.steps[2].channel"
    assert "send_sms" in error.hint


def test_task_contact_role_must_be_declared():
    data = minimal()
    data["tasks"][0]["contact_role"] = "vendr"

    error = only_error(validate(data))

    assert error.path == "tasks[0].contact_role"
    assert error.hint == "did you mean vendor?"


def test_eval_personas_must_use_declared_roles_and_cover_required_ones():
    data = minimal()
    data["evals"][0]["personas"] = {"supplier": {"traits": [{"type": "silent"}]}}

    assert sorted(paths(validate(data))) == ["evals[0].personas", "evals[0].personas.supplier"]


def test_sms_agent_must_carry_opt_out_text():
    data = minimal()
    del data["compliance"]

    error = only_error(validate(data))

    assert error.path == "compliance"
    assert "STOP" in error.hint


def test_template_placeholders_are_checked():
    data = minimal()
    data["model"]["scripted"]["messages"]["first"]["body"] = "Hi {contact.nme}, invoice {inputs.number}"

    result = validate(data)

    assert paths(result) == ["model.scripted.messages.first.body"] * 2
    assert result.errors[0].hint == "did you mean {contact.name}?"


def test_forbidden_phrase_in_a_template_is_caught():
    data = minimal()
    data["compliance"]["forbidden_phrases"] = ["Please Send"]

    error = only_error(validate(data))

    assert error.path == "model.scripted.messages.first.body"


def test_sms_step_needs_a_short_text():
    data = minimal()
    del data["model"]["scripted"]["messages"]["followup"]["short"]

    assert only_error(validate(data)).path == "model.scripted.messages.followup.short"


def test_scripted_provider_needs_templates():
    data = minimal()
    del data["model"]["scripted"]

    assert only_error(validate(data)).path == "model.scripted"


def test_duplicate_names_are_reported_at_the_repeat():
    data = minimal()
    data["capabilities"] = ["email", "sms", "email"]
    data["tasks"].append(copy.deepcopy(data["tasks"][0]))

    assert paths(validate(data)) == ["capabilities[2]", "tasks[1].key"]


def test_max_attempts_cannot_exceed_the_ladder():
    data = minimal()
    data["followup"]["max_attempts"] = 4

    assert only_error(validate(data)).path == "followup.max_attempts"


def test_config_error_formats():
    error = config.ConfigError("followup.steps[2].channel", "channel 'slack' is not allowed", "use one of: email")

    assert str(error) == "followup.steps[2].channel: channel 'slack' is not allowed (hint: use one of: email)"
    assert error.as_dict() == {
        "path": "followup.steps[2].channel",
        "message": "channel 'slack' is not allowed",
        "hint": "use one of: email",
    }
    with pytest.raises(AttributeError):
        error.path = "x"


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


@pytest.mark.parametrize(("approvals", "path", "hint"), [
    ({"outbound": "sometimes"}, "approvals.outbound", "none, first_message, all"),
    ("always", "approvals", "none, first_message, all"),
    ({"outbound": "all", "channels": {"fax": "all"}}, "approvals.channels.fax", "email, sms, slack, voice"),
    ({"outbound": "all", "channels": {"slack": "all"}}, "approvals.channels.slack", "add slack to capabilities"),
    ({"outbound": "all", "when": "always"}, "approvals.when", "outbound"),
])
def test_a_bad_approvals_setting_names_the_path_and_the_fix(approvals, path, hint):
    data = minimal()
    data["approvals"] = approvals

    error = only_error(validate(data))

    assert error.path == path
    assert hint in error.hint


@pytest.mark.parametrize(("field", "value", "path", "hint"), [
    ("acknowledge", "sometimes", "acknowledge", "every_reply, on_completion, never"),
    ("promise_grace", "45d", "followup.promise_grace", "promise_grace: 2bd"),
    ("promise_grace", "25bd", "followup.promise_grace", "promise_grace: 2bd"),
    ("promise_grace", "soon", "followup.promise_grace", "2bd"),
])
def test_a_bad_acknowledge_or_promise_grace_names_the_path_and_the_fix(field, value, path, hint):
    data = minimal()
    if field == "acknowledge":
        data["acknowledge"] = value
    else:
        data["followup"]["promise_grace"] = value

    error = only_error(validate(data))

    assert error.path == path
    assert hint in error.hint


def test_promise_grace_accepts_business_and_calendar_days():
    for value in ("2bd", "3d", "0m"):
        data = minimal()
        data["followup"]["promise_grace"] = value
        assert validate(data).ok, value
