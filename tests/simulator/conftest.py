"""Simulator test helpers: template versions, a deliberately broken one, and a stand-in engine.

Most tests run the real engine (scripted model, sandbox connectors). The
stand-in is for tests about what surrounds the engine (crash handling,
progress reporting) where the engine's own behaviour is not the subject.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from agents import versions
from agents.models import AgentVersion
from tests.factories import AgentFactory

TEMPLATES = Path(settings.BASE_DIR) / "fixtures" / "agents"
COLLECTOR_SOURCE = (TEMPLATES / "document-collector.yaml").read_text()
# Two steps instead of four: the golden "silent vendor" case expects exactly four messages.
SHORT_LADDER = """  steps:
    - {delay: 0m, channel: email}
    - {delay: 3bd, channel: email}
  max_attempts: 2
"""


def collector_source(*, broken: bool = False) -> str:
    """The document-collector template; `broken` cuts its ladder so the silent-vendor golden case fails."""
    if not broken:
        return COLLECTOR_SOURCE
    start = COLLECTOR_SOURCE.index("  steps:\n")
    end = COLLECTOR_SOURCE.index("  on_exhausted:")
    return COLLECTOR_SOURCE[:start] + SHORT_LADDER + COLLECTOR_SOURCE[end:]


def collector_draft(*, broken: bool = False, agent=None) -> AgentVersion:
    """A draft of the document-collector config; by default of a template agent, like `seed` loads."""
    agent = agent or AgentFactory(organization=None, slug="document-collector")
    draft = versions.create_draft(agent, source=collector_source(broken=broken))
    assert draft.is_valid, draft.validation_errors
    return draft


@pytest.fixture
def good_draft(db) -> AgentVersion:
    return collector_draft()


@pytest.fixture
def broken_draft(db) -> AgentVersion:
    return collector_draft(broken=True)


@dataclass
class FakeResult:
    name: str
    passed: bool
    reasons: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    run_id: int | None = None
    timeline: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def fake_run_case(version, case, *, organization, seed=0, weeks=None, start_at=None, progress=None) -> FakeResult:
    """Passes a case unless the ladder is shorter than its `min_messages`; one timeline row per ladder step."""
    ladder = version.compiled["followup"]["ladder"]
    wanted = case["expect"].get("min_messages") or 0
    passed = len(ladder) >= wanted
    timeline = [{"day": index * 3, "at": f"2030-01-{7 + index * 3:02d}T14:00:00+00:00", "type": "outbound",
                 "kind": "send_" + step["channel"], "channel": step["channel"], "direction": "out",
                 "summary": f"step {index}"} for index, step in enumerate(ladder)]
    if progress is not None:
        progress(0.5)
        progress(1.0)
    return FakeResult(
        name=case["name"], passed=passed,
        reasons=[] if passed else [f"expected >= {wanted} messages, got {len(ladder)}"],
        metrics={"days_to_done": None, "messages": len(ladder), "escalations": 1, "tokens": 0, "cost_usd": 0.0,
                 "episodes": len(ladder)},
        timeline=timeline,
    )


@pytest.fixture
def fake_engine(monkeypatch) -> types.ModuleType:
    """simulator.engine with run_case replaced (the module is stood in when it does not exist)."""
    try:
        engine = importlib.import_module("simulator.engine")
    except ImportError:
        engine = types.ModuleType("simulator.engine")
        monkeypatch.setitem(sys.modules, "simulator.engine", engine)
        monkeypatch.setattr(sys.modules["simulator"], "engine", engine, raising=False)
    monkeypatch.setattr(engine, "run_case", fake_run_case, raising=False)
    return engine



@pytest.fixture
def engine() -> types.ModuleType:
    """The real engine (scripted model, sandbox connectors): named by tests whose subject is its verdict."""
    return importlib.import_module("simulator.engine")
