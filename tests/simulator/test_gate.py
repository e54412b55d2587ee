import pytest

from agents import versions
from agents.models import AgentVersion, VersionStatus
from simulator import gate
from tests.factories import AgentFactory, agent_source, draft_version, scorecard_for

pytestmark = pytest.mark.django_db


def status_of(version: AgentVersion) -> str:
    return AgentVersion.objects.get(pk=version.pk).status


def test_publishing_without_any_scorecard_is_refused():
    draft = draft_version()

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)

    assert "no scorecard" in refused.value.reason
    assert refused.value.scorecard is None
    assert status_of(draft) == VersionStatus.DRAFT


def test_a_passing_scorecard_for_the_exact_version_publishes_and_is_kept_as_evidence():
    draft = draft_version()
    card = scorecard_for(draft, passed=True)

    published = gate.publish(draft)

    assert published.status == VersionStatus.PUBLISHED
    assert published.gate_scorecard["id"] == card.pk
    assert published.gate_scorecard["passed"] is True
    assert published.gate_scorecard["config_hash"] == draft.config_hash
    assert published.gate_scorecard["cases"] == [{"name": "golden-case", "passed": True, "reasons": []}]


def test_a_failing_latest_scorecard_is_refused_with_the_scorecard():
    draft = draft_version()
    card = scorecard_for(draft, passed=False)

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)

    assert refused.value.scorecard["id"] == card.pk
    assert refused.value.scorecard["passed"] is False
    assert "golden-case" in refused.value.reason
    assert status_of(draft) == VersionStatus.DRAFT


def test_only_the_latest_scorecard_counts():
    draft = draft_version()
    scorecard_for(draft, passed=True)
    latest = scorecard_for(draft, passed=False)

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)
    assert refused.value.scorecard["id"] == latest.pk

    scorecard_for(draft, passed=True)
    assert gate.publish(draft).status == VersionStatus.PUBLISHED


def test_a_scorecard_for_another_config_hash_does_not_count():
    draft = draft_version()
    scorecard_for(draft, passed=True, config_hash="0" * 64)

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)

    assert "current config" in refused.value.reason
    assert refused.value.scorecard is None


def test_editing_a_draft_after_its_passing_scorecard_needs_a_new_simulation():
    draft = draft_version()
    scorecard_for(draft, passed=True)

    versions.update_draft(draft, source=agent_source(draft.agent.slug, name="Renamed collector"))

    with pytest.raises(gate.PublishRefused):
        gate.publish(draft)
    assert status_of(draft) == VersionStatus.DRAFT


def test_a_scorecard_of_another_version_with_the_same_config_does_not_count():
    agent = AgentFactory()
    first = draft_version(agent)
    second = versions.create_draft(agent, source=first.source)
    assert second.config_hash == first.config_hash
    scorecard_for(first, passed=True)

    with pytest.raises(gate.PublishRefused):
        gate.publish(second)


def test_an_invalid_draft_is_refused_with_its_config_errors():
    draft = draft_version(source="slug: nope\n")

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)

    assert refused.value.errors
    assert refused.value.scorecard is None


def test_a_published_version_cannot_be_published_again():
    draft = draft_version()
    scorecard_for(draft, passed=True)
    gate.publish(draft)

    with pytest.raises(gate.PublishRefused) as refused:
        gate.publish(draft)

    assert "not a draft" in refused.value.reason
