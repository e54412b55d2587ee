import pytest
from django.db import DatabaseError, connection, transaction

from agents import versions
from agents.models import Agent, AgentVersion, Deployment, VersionStatus
from tests.factories import AgentFactory, OrganizationFactory, agent_source, draft_version, published_version

pytestmark = pytest.mark.django_db


def test_create_agent_and_first_draft_compiles_and_names_the_agent():
    agent = versions.create_agent(OrganizationFactory(), slug="w9", name="placeholder")

    draft = versions.create_draft(agent, source=agent_source("w9", name="W-9 collector"))

    assert draft.number == 1
    assert draft.status == VersionStatus.DRAFT
    assert draft.is_valid
    assert draft.compiled["slug"] == "w9"
    assert len(draft.config_hash) == 64
    agent.refresh_from_db()
    assert agent.name == "W-9 collector"
    assert agent.description == "Asks a vendor for their W-9."


def test_invalid_draft_is_stored_with_path_message_and_hint():
    agent = AgentFactory(slug="broken")

    draft = versions.create_draft(agent, source="slug: broken\nname: Broken\nfolowup: {}\n")

    assert draft.compiled is None
    assert draft.config_hash == ""
    paths = [error["path"] for error in draft.validation_errors]
    assert "folowup" in paths
    assert all(set(error) == {"path", "message", "hint"} for error in draft.validation_errors)


def test_a_config_naming_another_slug_is_an_error():
    agent = AgentFactory(slug="mine")

    draft = versions.create_draft(agent, source=agent_source("theirs"))

    assert not draft.is_valid
    assert draft.validation_errors[0]["path"] == "slug"


def test_edit_updates_the_working_draft_in_place():
    draft = draft_version()

    edited = versions.edit(draft.agent, source=agent_source(draft.agent.slug, name="Renamed"))

    assert edited.pk == draft.pk
    assert edited.number == 1
    assert AgentVersion.objects.get(pk=draft.pk).compiled["name"] == "Renamed"


def test_editing_a_published_agent_creates_draft_n_plus_one():
    published = published_version()

    draft = versions.edit(published.agent, source=agent_source(published.agent.slug, name="Next"))

    assert draft.pk != published.pk
    assert draft.number == published.number + 1
    assert draft.status == VersionStatus.DRAFT
    assert AgentVersion.objects.get(pk=published.pk).compiled["name"] == "W-9 collector"


def test_publish_freezes_a_valid_draft():
    draft = draft_version()

    published = versions.publish(draft, scorecard={"passed": 3})

    assert published.status == VersionStatus.PUBLISHED
    assert published.published_at is not None
    stored = AgentVersion.objects.get(pk=draft.pk)
    assert stored.status == VersionStatus.PUBLISHED
    assert stored.gate_scorecard == {"passed": 3}


def test_publishing_an_invalid_draft_is_refused_with_its_errors():
    agent = AgentFactory(slug="bad")
    draft = versions.create_draft(agent, source="slug: bad\n")

    with pytest.raises(versions.NotPublishable) as refused:
        versions.publish(draft)

    assert any(error["path"] == "name" for error in refused.value.errors)
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT


def test_publishing_twice_is_refused():
    published = published_version()

    with pytest.raises(versions.NotPublishable, match="not a draft"):
        versions.publish(published)


def test_update_draft_on_a_published_version_is_refused():
    published = published_version()

    with pytest.raises(versions.VersionReadOnly):
        versions.update_draft(published, source=agent_source(published.agent.slug, name="Sneaky"))

    assert AgentVersion.objects.get(pk=published.pk).compiled["name"] == "W-9 collector"


def test_raw_sql_cannot_change_a_published_version():
    published = published_version()

    with pytest.raises(DatabaseError, match="read-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE agents_agentversion SET source = 'x' WHERE id = %s", [published.pk])

    assert AgentVersion.objects.get(pk=published.pk).source != "x"


def test_queryset_update_cannot_change_a_published_version():
    published = published_version()

    with pytest.raises(DatabaseError, match="read-only"), transaction.atomic():
        AgentVersion.objects.filter(pk=published.pk).update(source="x")


def test_orm_save_cannot_change_a_published_version():
    published = published_version()
    published.source = "x"

    with pytest.raises(DatabaseError, match="read-only"), transaction.atomic():
        published.save()


def test_a_published_version_cannot_be_deleted():
    published = published_version()

    with pytest.raises(DatabaseError, match="cannot be deleted"), transaction.atomic():
        AgentVersion.objects.filter(pk=published.pk).delete()


def test_retire_a_published_version():
    published = published_version()

    retired = versions.retire(published)

    assert retired.status == VersionStatus.RETIRED
    assert AgentVersion.objects.get(pk=published.pk).status == VersionStatus.RETIRED


def test_retire_refuses_drafts_and_deployed_versions():
    with pytest.raises(versions.VersionError):
        versions.retire(draft_version())
    published = published_version(AgentFactory(organization=OrganizationFactory(slug="acme")))
    versions.deploy(published.agent.organization, published)

    with pytest.raises(versions.VersionInUse, match="acme"):
        versions.retire(published)


def test_deploy_keeps_one_active_deployment_per_org_and_agent():
    organization = OrganizationFactory()
    first = published_version(AgentFactory(organization=organization))
    versions.edit(first.agent, source=agent_source(first.agent.slug, name="Second"))
    second = versions.publish(versions.latest_version(first.agent))

    old = versions.deploy(organization, first)
    new = versions.deploy(organization, second)

    assert versions.deploy(organization, second).pk == new.pk
    active = Deployment.objects.filter(organization=organization, agent=first.agent, active=True)
    assert list(active) == [new]
    assert Deployment.objects.get(pk=old.pk).active is False
    assert new.agent_id == first.agent_id


def test_deploying_a_draft_is_refused():
    draft = draft_version()
    with pytest.raises(versions.NotDeployable):
        versions.deploy(draft.agent.organization, draft)


def test_an_organization_deploys_only_its_own_agents():
    theirs, template = published_version(), published_version(AgentFactory(organization=None))
    mine = OrganizationFactory()
    for version in (theirs, template):
        with pytest.raises(versions.NotDeployable, match="copy it first"):
            versions.deploy(mine, version)
    assert not Deployment.objects.filter(organization=mine).exists()


def test_slugs_are_unique_per_organization_and_among_templates():
    mine, theirs = OrganizationFactory(), OrganizationFactory()
    for owner in (mine, theirs, None):
        versions.create_agent(owner, slug="w9", name="W-9")
    for owner in (mine, None):
        with pytest.raises(versions.SlugTaken):
            versions.create_agent(owner, slug="w9", name="Again")
    assert Agent.objects.filter(slug="w9").count() == 3


def test_copy_template_gives_the_organization_a_draft_of_the_published_config():
    template = AgentFactory(organization=None, slug="w9")
    published = published_version(template)
    versions.edit(template, source=agent_source("w9", name="Unpublished edit"))
    organization = OrganizationFactory()

    draft = versions.copy_template(template, organization=organization)

    assert (draft.agent.organization, draft.agent.slug, draft.number) == (organization, "w9", 1)
    assert (draft.status, draft.source) == (VersionStatus.DRAFT, published.source)
    with pytest.raises(versions.VersionError):
        versions.copy_template(draft.agent, organization=OrganizationFactory())


def test_follow_template_keeps_one_copy_per_organization_and_is_idempotent():
    template = published_version(AgentFactory(organization=None, slug="w9"))
    organization = OrganizationFactory()

    first = versions.follow_template(template, organization=organization)
    again = versions.follow_template(template, organization=organization)

    assert first.pk == again.pk and first.status == VersionStatus.PUBLISHED
    assert first.agent.organization == organization and first.agent_id != template.agent_id


def test_validate_refreshes_a_drafts_stored_errors():
    draft = draft_version()
    AgentVersion.objects.filter(pk=draft.pk).update(validation_errors=[{"path": "x", "message": "stale", "hint": ""}])
    draft = AgentVersion.objects.get(pk=draft.pk)

    result = versions.validate(draft)

    assert result.ok
    assert AgentVersion.objects.get(pk=draft.pk).validation_errors == []


def test_load_template_is_idempotent(tmp_path):
    template = tmp_path / "w9.yaml"
    template.write_text(agent_source("w9-template"))

    first = versions.load_template(template)
    again = versions.load_template(template)

    assert first.status == VersionStatus.PUBLISHED
    assert again.pk == first.pk
    assert AgentVersion.objects.filter(agent__slug="w9-template").count() == 1


def test_load_template_publishes_a_changed_template_as_the_next_version(tmp_path):
    template = tmp_path / "w9.yaml"
    template.write_text(agent_source("w9-template"))
    first = versions.load_template(template)
    template.write_text(agent_source("w9-template", name="Changed"))

    second = versions.load_template(template)

    assert second.number == first.number + 1
    assert second.status == VersionStatus.PUBLISHED


def test_load_template_keeps_an_invalid_template_as_a_draft(tmp_path):
    template = tmp_path / "broken.yaml"
    template.write_text("slug: broken-template\nname: Broken\n")

    first = versions.load_template(template)
    again = versions.load_template(template)

    assert first.status == VersionStatus.DRAFT
    assert first.validation_errors
    assert again.pk == first.pk


def test_publishing_refuses_a_config_other_than_the_one_the_evidence_was_gathered_on():
    version = draft_version()
    with pytest.raises(versions.NotPublishable, match="changed after it was simulated"):
        versions.publish(version, expected_config_hash="0" * 64)
    assert versions.publish(version, expected_config_hash=version.config_hash).status == "published"
