"""Every template agent's golden eval cases pass in the simulator, on the real runtime and the scripted model,
and none of them waits on the wall clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from agents import versions
from simulator import engine, sim_org
from tests.factories import AgentFactory

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "agents"


def _cases() -> list[tuple[str, str]]:
    found = []
    for path in sorted(TEMPLATES_DIR.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()).get("evals") or []:
            found.append((path.stem, case["name"]))
    return found


def template_version(stem: str):
    source = (TEMPLATES_DIR / f"{stem}.yaml").read_text()
    slug = yaml.safe_load(source)["slug"]
    version = versions.create_draft(AgentFactory(slug=slug, name=slug), source=source)
    assert version.is_valid, version.validation_errors
    return version


@pytest.mark.django_db
@pytest.mark.parametrize(("template", "case_name"), _cases())
def test_golden_case_passes(template, case_name, monkeypatch):
    def no_sleep(seconds):
        raise AssertionError(f"the simulation slept {seconds}s")

    monkeypatch.setattr(time, "sleep", no_sleep)
    version = template_version(template)
    case = next(c for c in version.compiled["evals"] if c["name"] == case_name)

    result = engine.run_case(version, case, organization=sim_org.organization_for(None), seed=0)

    assert result.passed, "\n".join(result.reasons + [f"{r['day']:6.2f} {r['summary']}" for r in result.timeline])
    assert result.metrics["final_status"] == result.as_dict()["metrics"]["final_status"]
