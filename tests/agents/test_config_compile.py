"""Compilation of a validated config to the normalized plan, and the plan's hash."""

from __future__ import annotations

import copy
import hashlib
import json

import yaml

from agents import config
from tests.agents.config_helpers import minimal

PLAN_KEYS = {
    "cadence",
    "schema",
    "slug",
    "name",
    "description",
    "capabilities",
    "instructions",
    "inputs",
    "contacts",
    "tasks",
    "followup",
    "compliance",
    "approvals",
    "acknowledge",
    "tools",
    "model",
    "evals",
}


def compile_data(data: dict) -> dict:
    result = config.validate_data(copy.deepcopy(data))
    assert result.ok, [str(e) for e in result.errors]
    return config.compile_config(result.config)


def compile_text(text: str) -> dict:
    result = config.validate_source(text)
    assert result.ok, [str(e) for e in result.errors]
    return config.compile_config(result.config)


def test_plan_has_the_documented_keys_and_survives_json():
    plan = compile_data(minimal())

    assert set(plan) == PLAN_KEYS
    assert plan["schema"] == 1
    assert json.loads(json.dumps(plan)) == plan


def test_ladder_separates_business_days_from_seconds():
    data = minimal()
    data["followup"]["steps"] = [
        {"delay": "0m", "channel": "email"},
        {"delay": "3bd", "channel": "email"},
        {"delay": "3d", "channel": "sms"},
    ]

    followup = compile_data(data)["followup"]

    assert followup["ladder"] == [
        {"step": 0, "channel": "email", "delay_s": 0, "delay_business_days": 0},
        {"step": 1, "channel": "email", "delay_s": 0, "delay_business_days": 3},
        {"step": 2, "channel": "sms", "delay_s": 259200, "delay_business_days": 0},
    ]


def test_followup_defaults_are_filled_in():
    followup = compile_data(minimal())["followup"]

    assert followup == followup | {
        "timezone_source": "contact",
        "timezone": None,
        "business_days": [0, 1, 2, 3, 4],
        "business_hours": {"start": "09:00", "end": "17:00"},
        "max_attempts": 3,
        "on_exhausted": "escalate",
        "on_reply": "pause",
        "reply_grace_s": 172800,
        "escalation_sla_s": 4 * 3600,
        "promise_grace": {"delay_s": 0, "delay_business_days": 2},
    }


def test_acknowledge_defaults_to_on_completion_and_compiles_as_written():
    assert compile_data(minimal())["acknowledge"] == "on_completion"
    data = minimal()
    data["acknowledge"] = "never"
    assert compile_data(data)["acknowledge"] == "never"


def test_promise_grace_compiles_to_seconds_or_business_days():
    data = minimal()
    data["followup"]["promise_grace"] = "3d"
    assert compile_data(data)["followup"]["promise_grace"] == {"delay_s": 3 * 86400, "delay_business_days": 0}


def test_fixed_timezone_and_weekdays_are_normalized():
    data = minimal()
    data["followup"] |= {"timezone_source": "fixed", "timezone": "Europe/Paris", "business_days": ["sun", "mon"]}

    followup = compile_data(data)["followup"]

    assert followup["timezone"] == "Europe/Paris"
    assert followup["business_days"] == [0, 6]


def test_compliance_defaults_and_recipient_shorthands():
    data = minimal()
    compliance = compile_data(data)["compliance"]
    assert compliance["quiet_hours"] == {"start": "20:00", "end": "08:00"}
    assert compliance["per_contact_caps"] == {"per_day": 2, "per_week": 6}
    assert compliance["allowed_recipients"] == "run_contacts"

    data["compliance"] |= {"quiet_hours": None, "allowed_recipients": ["b.example", "a.example"]}
    compliance = compile_data(data)["compliance"]

    assert compliance["quiet_hours"] is None
    assert compliance["allowed_recipients"] == {"run_contacts": True, "email_domains": ["a.example", "b.example"]}


def test_tools_are_the_listed_ones_in_canonical_order_with_precise_schemas():
    data = minimal()
    data["tools"] = ["finish", "mark_task_done", "send_sms", "send_email"]

    tools = {tool["name"]: tool for tool in compile_data(data)["tools"]}

    assert list(tools) == ["send_email", "send_sms", "mark_task_done", "finish"]
    email = tools["send_email"]["parameters"]
    assert email["required"] == ["to_role", "subject", "body"]
    assert email["additionalProperties"] is False
    assert email["properties"]["to_role"]["enum"] == ["vendor"]
    assert tools["mark_task_done"]["parameters"]["properties"]["task_key"]["enum"] == ["collect_w9"]


def test_default_tools_follow_the_capabilities():
    names = [tool["name"] for tool in compile_data(minimal())["tools"]]

    assert names == ["send_email", "send_sms", "ask_human", "mark_task_done", "schedule_followup", "record_promise",
                     "record_absence", "note", "finish"]


def test_send_tool_roles_are_only_contacts_reachable_on_its_channel():
    data = minimal()
    data["contacts"].append({"role": "accountant", "required": False, "channels": ["email"]})

    tools = {tool["name"]: tool for tool in compile_data(data)["tools"]}

    assert tools["send_email"]["parameters"]["properties"]["to_role"]["enum"] == ["vendor", "accountant"]
    assert tools["send_sms"]["parameters"]["properties"]["to_role"]["enum"] == ["vendor"]


def test_scripted_templates_get_their_fallbacks():
    messages = compile_data(minimal())["model"]["scripted"]["messages"]

    assert messages["first"]["short"] == messages["first"]["body"]
    assert messages["followup"]["subject"] == "Re: W-9 for {org.name}"
    assert messages["final"] == messages["followup"]
    assert messages["ack"] is None and messages["thanks"] is None


def test_scripted_intents_extend_the_builtin_phrases():
    data = minimal()
    data["model"]["scripted"]["intents"] = {"opt_out": ["Leave Me Alone"]}

    intents = compile_data(data)["model"]["scripted"]["intents"]

    assert "leave me alone" in intents["opt_out"] and "unsubscribe" in intents["opt_out"]
    assert set(intents) == {"out_of_office", "opt_out", "dispute", "claim_done", "wrong_person", "channel_request",
                            "legal_threat", "promise", "status_update", "acknowledgement"}


def test_sends_attachment_compiles_to_replies_after():
    data = minimal()
    data["evals"][0]["personas"]["vendor"]["traits"] = [
        {"type": "sends_attachment", "days": 3, "attachment": {"filename": "w9.pdf"}}
    ]

    trait = compile_data(data)["evals"][0]["personas"]["vendor"]["traits"][0]

    assert trait == {
        "type": "replies_after",
        "days": 3.0,
        "business_days": None,
        "text": "",
        "attachment": {"filename": "w9.pdf", "content_type": "application/pdf", "text": ""},
        "via": "direct",
        "relative_to": "first",
    }


def test_compile_is_deterministic():
    assert compile_data(minimal()) == compile_data(minimal())
    assert config.config_hash(compile_data(minimal())) == config.config_hash(compile_data(minimal()))


def test_hash_is_sha256_of_canonical_json():
    plan = compile_data(minimal())
    canonical = json.dumps(plan, sort_keys=True, separators=(",", ":"))

    assert config.config_hash(plan) == hashlib.sha256(canonical.encode()).hexdigest()


def test_hash_ignores_yaml_formatting_key_order_and_set_order():
    data = minimal()
    block = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    flow = "# same config, other layout\n" + yaml.safe_dump(data, sort_keys=True, default_flow_style=True, width=60)
    reordered = copy.deepcopy(data)
    reordered["capabilities"] = ["sms", "email"]
    reordered["contacts"][0]["channels"] = ["sms", "email"]

    hashes = {
        config.config_hash(compile_text(block)),
        config.config_hash(compile_text(flow)),
        config.config_hash(compile_data(reordered)),
    }

    assert len(hashes) == 1


def test_hash_changes_when_the_config_changes():
    data = minimal()
    before = config.config_hash(compile_data(data))
    data["followup"]["steps"][1]["delay"] = "4bd"

    assert config.config_hash(compile_data(data)) != before


def test_default_values_written_out_do_not_change_the_hash():
    data = minimal()
    explicit = copy.deepcopy(data)
    explicit["followup"] |= {"on_reply": "pause", "reply_grace": "48h", "max_attempts": 3}
    explicit["contacts"][0]["required"] = True

    assert config.config_hash(compile_data(explicit)) == config.config_hash(compile_data(data))


def test_approvals_default_to_none_and_compile_per_channel_in_canonical_order():
    assert compile_data(minimal())["approvals"] == {"outbound": "none", "channels": {}}
    data = minimal()
    data["approvals"] = {"outbound": "first_message", "channels": {"sms": "all", "email": "none"}}

    assert compile_data(data)["approvals"] == {"outbound": "first_message",
                                               "channels": {"email": "none", "sms": "all"}}
    data["approvals"] = "all"
    assert compile_data(data)["approvals"] == {"outbound": "all", "channels": {}}


def test_promise_and_absence_tools_name_the_agents_own_tasks_and_roles():
    tools = {tool["name"]: tool["parameters"] for tool in compile_data(minimal())["tools"]}

    promise, absence = tools["record_promise"], tools["record_absence"]
    assert promise["properties"]["task_key"]["enum"] == [t["key"] for t in minimal()["tasks"]]
    assert promise["properties"]["due"]["format"] == "date"
    assert set(promise["required"]) == {"task_key", "due", "what", "quote"}
    assert absence["properties"]["to_role"]["enum"] == [c["role"] for c in minimal()["contacts"]]
    assert set(absence["required"]) == {"to_role", "until", "reason"}
