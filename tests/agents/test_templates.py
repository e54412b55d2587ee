"""The template agents in fixtures/agents: valid, compiled, and with golden cases that fit their checks."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from agents import config
from agents.config import placeholders, source
from tests.agents.config_helpers import locations, set_at

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
TEMPLATES = ("document-collector", "weekly-checkin", "invoice-chaser")

SAMPLE_VALUES = {
    "contact.name": "Ada Lovelace",
    "contact.first_name": "Ada",
    "contact.role": "vendor",
    "contact.email": "ada@example.com",
    "contact.phone": "+15555550100",
    "agent.name": "Agent",
    "org.name": "Acme",
    "run.goal": "Goal",
    "task.key": "key",
    "task.title": "Title",
    "tasks.open": "Title",
    "human.answer": "Yes",
    "attempt": 2,
    "inputs.invoice_number": "INV-1",
    "inputs.amount": "$10",
    "inputs.due_date": "2030-01-01",
    "inputs.project": "Rollout",
}


def read(slug: str) -> str:
    return (TEMPLATES_DIR / f"{slug}.yaml").read_text()


def plan_of(slug: str) -> dict:
    result = config.validate_source(read(slug))
    assert result.ok, [str(error) for error in result.errors]
    return config.compile_config(result.config)


def test_the_three_templates_are_shipped():
    assert sorted(path.stem for path in TEMPLATES_DIR.glob("*.yaml")) == sorted(TEMPLATES)


@pytest.mark.parametrize("slug", TEMPLATES)
def test_template_validates_compiles_and_hashes_stably(slug):
    plan = plan_of(slug)

    assert plan["slug"] == slug
    assert config.config_hash(plan) == config.config_hash(plan_of(slug))
    assert len(config.config_hash(plan)) == 64


@pytest.mark.parametrize("slug", TEMPLATES)
def test_template_runs_offline_with_scripted_templates(slug):
    scripted = plan_of(slug)["model"]["scripted"]

    assert scripted is not None
    for template in [*scripted["messages"].values(), *(t for o in scripted["tasks"].values() for t in o.values())]:
        if template is None:
            continue
        for text in template.values():
            if text is not None:
                rendered = placeholders.render(text, values=SAMPLE_VALUES)
                assert "{" not in rendered and "}" not in rendered, text


@pytest.mark.parametrize("slug", TEMPLATES)
def test_template_has_at_least_three_golden_cases_that_each_check_something(slug):
    evals = plan_of(slug)["evals"]

    assert len(evals) >= 3
    assert len({case["name"] for case in evals}) == len(evals)
    for case in evals:
        expect = case["expect"]
        specific = {k: v for k, v in expect.items() if not k.startswith("no_") and v not in (None, [])}
        assert specific, f"{case['name']} only checks the invariants"
        assert any(case["personas"].values())


@pytest.mark.parametrize("slug", TEMPLATES)
def test_template_has_a_silent_case_that_escalates(slug):
    evals = plan_of(slug)["evals"]

    silent = [c for c in evals if any(t["type"] == "silent" for p in c["personas"].values() for t in p["traits"])]

    assert silent and all(case["expect"]["escalated"] is True for case in silent)


def test_collector_golden_attachments_satisfy_the_w9_check():
    plan = plan_of("document-collector")
    check = plan["tasks"][0]["done_when"]
    attachments = [t["attachment"] for c in plan["evals"] for t in _traits(c) if t.get("attachment")]

    assert attachments
    for attachment in attachments:
        assert attachment["content_type"] in check["content_types"]
        assert re.search(check["filename_pattern"], attachment["filename"])


def test_invoice_golden_cases_complete_only_on_a_remittance_never_on_a_promised_date():
    plan = plan_of("invoice-chaser")
    [task] = [t for t in plan["tasks"] if t["required"]]
    check = task["done_when"]
    assert check["type"] == "attachment_received"  # a promise is tracked, not evidence

    for case in plan["evals"]:
        files = [t["attachment"] for t in _traits(case) if t.get("attachment")]
        sends_proof = any(f["content_type"] in check["content_types"]
                          and re.search(check["filename_pattern"], f["filename"]) for f in files)
        expects_done = case["expect"]["tasks_done"] is True or case["expect"]["tasks_done_by_day"] is not None
        assert sends_proof == expects_done, case["name"]


def test_weekly_checkin_pattern_tells_live_from_not_yet():
    pattern = plan_of("weekly-checkin")["tasks"][0]["done_when"]["pattern"]

    assert re.search(pattern, "Good news: we're live as of this morning!")
    assert re.search(pattern, "We went live yesterday.")
    assert not re.search(pattern, "Not yet, it is not live.")
    assert not re.search(pattern, "We're blocked.")


@pytest.mark.parametrize("slug", TEMPLATES)
def test_breaking_any_node_of_a_template_gives_errors_not_exceptions(slug):
    data = source.load(read(slug))
    for loc in locations(data):
        for junk in (None, "x", []):
            broken = copy.deepcopy(data)
            set_at(broken, loc=loc, value=junk)
            result = config.validate_data(broken)
            assert result.ok or all(error.path and error.hint for error in result.errors), loc


def _traits(case: dict) -> list[dict]:
    return [trait for persona in case["personas"].values() for trait in persona["traits"]]
