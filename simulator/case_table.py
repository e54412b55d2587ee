"""A scorecard as the Studio shows it: one row per case, each expectation with its result, and the case's timeline.

A case's `reasons` name the expectation they fail first ("max_messages: 4
message(s) sent…", simulator.expectations.check); an expectation without a
reason passed. The expectations come from the case as the version states it
(its golden `evals`, or the agent's generated EvalCase); the timeline from
the Simulation behind the scorecard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from simulator.models import EvalCase, Scorecard


@dataclass
class Expectation:
    key: str
    expected: str  # as the builder would write it in YAML's flow style: true, 3, ["email"]
    passed: bool | None  # None: not checked (the case failed before its expectations were looked at)
    reason: str = ""


@dataclass
class CaseRow:
    name: str
    kind: str
    passed: bool
    expectations: list[Expectation]
    # Reasons that belong to no expectation (a crash, a refused start).
    other_reasons: list[str]
    metrics: dict
    run_id: int | None
    timeline: list[dict] = field(default_factory=list)


def rows_for(scorecard: Scorecard) -> list[CaseRow]:
    specs = _specs(scorecard)
    results = {result.get("name"): result for result in (scorecard.simulation.results if scorecard.simulation else [])}
    rows = []
    for case in scorecard.cases:
        name = case.get("name") or "?"
        reasons = list(case.get("reasons") or [])
        expectations, claimed = [], set()
        for key, expected in _checked(specs.get(name, {}).get("expect") or {}):
            own = [reason for reason in reasons if reason.startswith(f"{key}:")]
            claimed.update(own)
            # The row already names the expectation; its reasons read without repeating it.
            expectations.append(Expectation(key=key, expected=json.dumps(expected), passed=not own,
                                            reason="; ".join(reason.removeprefix(f"{key}:").strip() for reason in own)))
        if not case.get("passed") and not claimed:
            for expectation in expectations:  # a crash or a refused start: nothing was checked
                expectation.passed = None
        rows.append(CaseRow(
            name=name, kind=case.get("kind") or "", passed=bool(case.get("passed")), expectations=expectations,
            other_reasons=[reason for reason in reasons if reason not in claimed], metrics=case.get("metrics") or {},
            run_id=case.get("run_id"), timeline=results.get(name, {}).get("timeline") or [],
        ))
    return rows


def _checked(expect: dict) -> list[tuple[str, object]]:
    # Compiled cases list every check; unset ones (None, [], a switched-off `no_*` invariant) are skipped.
    return [(key, value) for key, value in expect.items()
            if value is not None and value != [] and not (key.startswith("no_") and value is False)]


def _specs(scorecard: Scorecard) -> dict[str, dict]:
    """Case name → its spec: the version's golden cases win over generated ones of the same name."""
    version = scorecard.version
    specs = {case.name: case.spec for case in EvalCase.objects.filter(agent_id=version.agent_id)}
    specs.update({case["name"]: case for case in (version.compiled or {}).get("evals", [])})
    return specs
