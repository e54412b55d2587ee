"""The publish gate: the one entry the Studio, the API and the seed command call to publish a version.

A draft is published only when it is valid and its latest Scorecard for its
current config hash passed: a scorecard speaks for the exact config it
simulated, so editing a draft (same id, new hash) needs a new simulation.
The gate never simulates by itself; callers run `scorecards.score` first
(the API's `simulate` action, `manage.py simulate`, the seed command).
"""

from __future__ import annotations

from agents import versions
from agents.models import AgentVersion, VersionStatus
from simulator import scorecards


class PublishRefused(Exception):
    """The gate said no. `reason` is for people; `scorecard` is the latest one for the version's config, if any."""

    def __init__(self, reason: str, scorecard: dict | None = None, *, errors: list[dict] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.scorecard = scorecard
        self.errors = errors or []


def publish(version: AgentVersion, *, user=None) -> AgentVersion:
    """Publish `version` if it passes the gate; returns the published version or raises PublishRefused.

    `user` is who asked (None for the API's key-based callers); it is not
    stored yet because versions have no publisher column.
    """
    stored = AgentVersion.objects.select_related("agent").get(pk=version.pk)
    if stored.status != VersionStatus.DRAFT:
        raise PublishRefused(f"{stored} is {stored.status}, not a draft")
    # Validate first: it refreshes a draft's stored hash if the schema moved, and the scorecard must match that.
    result = versions.validate(stored)
    if not result.ok:
        errors = [error.as_dict() for error in result.errors]
        raise PublishRefused(f"{stored} has {len(errors)} config error(s); fix them before publishing", errors=errors)
    stored.refresh_from_db(fields=["config_hash"])
    card = scorecards.latest(stored)
    if card is None:
        raise PublishRefused(_missing_reason(stored))
    summary = scorecards.as_dict(card)
    if not card.passed:
        failed = [case["name"] for case in card.cases if not case["passed"]]
        detail = f"cases failed: {', '.join(failed)}" if failed else card.metrics.get("reason", "no cases passed")
        raise PublishRefused(f"{stored}: the latest scorecard (#{card.pk}) failed; {detail}", scorecard=summary)
    try:
        return versions.publish(stored, scorecard=_evidence(summary), expected_config_hash=card.config_hash)
    except versions.NotPublishable as refused:
        raise PublishRefused(str(refused), scorecard=summary, errors=refused.errors) from refused


def _missing_reason(version: AgentVersion) -> str:
    if version.scorecards.exists():
        return f"{version} has no scorecard for its current config (edited since it was simulated); simulate it again"
    return f"{version} has no scorecard; simulate it first"


def _evidence(summary: dict) -> dict:
    # What the published version keeps: per-case outcome and the aggregate, not every case's metrics.
    cases = [{"name": case["name"], "passed": case["passed"], "reasons": case["reasons"]} for case in summary["cases"]]
    return {**summary, "cases": cases}
