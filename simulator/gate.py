"""The publish gate: the one entry the Studio and the API call to publish a version.

Today the gate checks that the draft's config is valid and publishes it
through `agents.versions.publish`. Requiring a passing scorecard from the
version's golden eval cases (and storing it as `gate_scorecard`) is added by
the simulator issue; callers already go through here so that change needs
no caller to move.
"""

from __future__ import annotations

from agents import versions
from agents.models import AgentVersion


class PublishRefused(Exception):
    """The gate said no. `reason` is for people; `scorecard` is the failing one when a simulation decided."""

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
    try:
        return versions.publish(version, scorecard=None)
    except versions.NotPublishable as refused:
        raise PublishRefused(str(refused), errors=refused.errors) from refused
