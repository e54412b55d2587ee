"""Validation of agent configs: exact error paths with their fixes, every error at once."""

from __future__ import annotations

import copy

import pytest

from agents import config
from tests.agents.config_helpers import minimal, only_error, paths, validate


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
