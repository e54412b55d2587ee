"""Agents, their numbered versions and deployments: the only module that writes them.

A version is a draft while it is edited; publishing freezes it (the
`agents_version_readonly` trigger refuses later changes to its config even
through raw SQL) and editing a published agent starts draft N+1. Publishing
from the admin or the API goes through `simulator.gate.publish`, which checks
the scorecard and then calls `publish` here; this module never imports the
simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.config import ConfigError, ValidationResult, compile_config, config_hash, validate_source
from agents.config import source as yaml_source
from agents.models import Agent, AgentVersion, Deployment, Organization, VersionStatus


class VersionError(Exception):
    """A version operation that the version's state does not allow."""


class VersionReadOnly(VersionError):
    """The version is published or retired; its config cannot change."""


class NotPublishable(VersionError):
    """The draft cannot be published; `errors` lists what is wrong with its config."""

    def __init__(self, message: str, *, errors: list[dict] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class NotDeployable(VersionError):
    """Only published versions can be deployed."""


class VersionInUse(VersionError):
    """The version still backs an active deployment."""


class TemplateReadOnly(VersionError):
    """Templates change only through fixtures/agents/ and `manage.py seed`; copy one to edit it."""


class SlugTaken(VersionError):
    """The organization already has an agent with this slug."""


def create_agent(organization: Organization | None, *, slug: str, name: str, description: str = "") -> Agent:
    """A new agent of `organization` (None: a template). Raises SlugTaken when the slug is in use there."""
    try:
        with transaction.atomic():
            return Agent.objects.create(organization=organization, slug=slug, name=name, description=description)
    except IntegrityError:
        owner = organization.slug if organization else "the templates"
        raise SlugTaken(f"{owner} already has an agent {slug!r}") from None


def copy_template(template: Agent, *, organization: Organization, user=None) -> AgentVersion:
    """Copy a template into `organization` as its own agent; returns draft v1 with the template's config.

    The source is the template's latest published version (else its latest
    version). The draft still needs a scorecard and the gate to be published.
    Raises SlugTaken when the organization already has an agent with the slug.
    """
    if not template.is_template:
        raise VersionError(f"{template.slug} is not a template")
    origin = latest_published(template) or latest_version(template)
    with transaction.atomic():
        agent = create_agent(organization, slug=template.slug, name=template.name, description=template.description)
        return create_draft(agent, source=origin.source if origin else "", user=user, based_on=origin)


def refuse_template(agent: Agent) -> None:
    """Raise TemplateReadOnly for a template: entry points call it before any change a person asked for."""
    if agent.is_template:
        raise TemplateReadOnly(
            f"{agent.slug} is a template and read-only; copy it into your organization and edit the copy"
        )


def create_draft(agent: Agent, *, source: str, user=None, based_on: AgentVersion | None = None) -> AgentVersion:
    """A new draft numbered after the agent's latest version; stored even when invalid, with its errors.

    `based_on` is the version the source started from (what the Studio diffs the draft against).
    """
    with transaction.atomic():
        # The agent row lock serializes numbering; the unique constraint is the backstop.
        Agent.objects.select_for_update(no_key=True).filter(pk=agent.pk).get()
        latest = AgentVersion.objects.filter(agent=agent).aggregate(n=Max("number"))["n"] or 0
        version = AgentVersion(agent=agent, number=latest + 1, created_by=user, based_on=based_on)
        _apply_source(version, source)
        version.save()
        _follow_config(version)
    return version


def update_draft(version: AgentVersion, *, source: str) -> AgentVersion:
    """Replace a draft's source (and its compiled plan or errors); refuses published and retired versions."""
    with transaction.atomic():
        current = _lock(version)
        if current.status != VersionStatus.DRAFT:
            raise VersionReadOnly(f"{current} is {current.status}: edit the agent to start a new draft")
        _apply_source(version, source)
        version.save(update_fields=["source", "compiled", "config_hash", "validation_errors"])
        _follow_config(version)
    return version


def edit(agent: Agent, *, source: str, user=None) -> AgentVersion:
    """Save `source` as the agent's working draft: the latest version if it is a draft, else a new draft N+1."""
    latest = latest_version(agent)
    if latest is not None and latest.status == VersionStatus.DRAFT:
        return update_draft(latest, source=source)
    return create_draft(agent, source=source, user=user, based_on=latest)


def origin_of(version: AgentVersion) -> AgentVersion | None:
    """The version `version` started from: its `based_on`, else the agent's version numbered just below it."""
    if version.based_on_id is not None:
        return AgentVersion.objects.select_related("agent").filter(pk=version.based_on_id).first()
    return (AgentVersion.objects.select_related("agent").filter(agent_id=version.agent_id, number__lt=version.number)
            .order_by("-number").first())


def validate(version: AgentVersion) -> ValidationResult:
    """Validate the version's source now; a draft's stored plan and errors are refreshed to match."""
    result = _check(version.source, agent=version.agent)
    if version.status == VersionStatus.DRAFT and _stored_result_differs(version, result):
        with transaction.atomic():
            current = _lock(version)
            # Write back only what was validated: a newer edit of the draft wins.
            if current.status == VersionStatus.DRAFT and current.source == version.source:
                _apply_source(version, version.source)
                version.save(update_fields=["compiled", "config_hash", "validation_errors"])
    return result


def publish(
    version: AgentVersion, *, scorecard: dict | None = None, expected_config_hash: str | None = None
) -> AgentVersion:
    """Freeze the stored draft as published; `scorecard` is the gate's evidence, kept with it.

    `expected_config_hash` is the config the evidence was gathered on: checked
    under the row lock, so an edit that lands after the gate looked refuses.
    Returns the published row; raises NotPublishable (with `errors`) for an
    invalid or non-draft version.
    """
    stored = AgentVersion.objects.select_related("agent").get(pk=version.pk)
    if stored.status != VersionStatus.DRAFT:
        raise NotPublishable(f"{stored} is {stored.status}, not a draft")
    # Re-validate: the schema may have moved since the draft was saved.
    result = validate(stored)
    if not result.ok:
        errors = _error_dicts(result.errors)
        raise NotPublishable(f"{stored} has {len(errors)} config error(s); fix them before publishing", errors=errors)
    with transaction.atomic():
        current = _lock(stored)
        if current.status != VersionStatus.DRAFT:
            raise NotPublishable(f"{current} is already {current.status}")
        if current.source != stored.source:
            raise NotPublishable(f"{current} was edited while publishing; validate it again")
        if expected_config_hash is not None and current.config_hash != expected_config_hash:
            raise NotPublishable(f"{current} changed after it was simulated; simulate it again")
        current.mark_published()
        current.published_at = timezone.now()
        current.gate_scorecard = scorecard
        current.save(update_fields=["status", "published_at", "gate_scorecard"])
    return current


def retire(version: AgentVersion) -> AgentVersion:
    """Retire a published version; refused while an organization still runs it. Pinned runs continue."""
    with transaction.atomic():
        current = _lock(version)
        if current.status != VersionStatus.PUBLISHED:
            raise VersionError(f"{current} is {current.status}; only published versions can be retired")
        in_use = list(
            Deployment.objects.filter(version=current, active=True).values_list("organization__slug", flat=True)
        )
        if in_use:
            raise VersionInUse(f"{current} is deployed to {', '.join(in_use)}: deploy another version there first")
        current.mark_retired()
        current.save(update_fields=["status"])
    return current


def deploy(organization: Organization, version: AgentVersion) -> Deployment:
    """Make `version` the organization's active deployment of its agent; the previous one is deactivated."""
    with transaction.atomic():
        # The organization row lock serializes deploys so the one-active constraint never trips.
        Organization.objects.select_for_update(no_key=True).filter(pk=organization.pk).get()
        current = AgentVersion.objects.select_related("agent").get(pk=version.pk)
        if current.agent.organization_id != organization.pk:
            # Templates and other organizations' agents: an organization runs only what it owns.
            raise NotDeployable(f"{current.agent.slug} is not an agent of {organization.slug}; copy it first")
        if current.status != VersionStatus.PUBLISHED:
            raise NotDeployable(f"{current} is {current.status}; only published versions can be deployed")
        active = Deployment.objects.filter(organization=organization, agent_id=current.agent_id, active=True).first()
        if active is not None and active.version_id == current.pk:
            return active
        if active is not None:
            Deployment.objects.filter(pk=active.pk).update(active=False)
        return Deployment.objects.create(organization=organization, agent_id=current.agent_id, version=current)


def load_template(
    path: Path | str, *, publisher: Callable[[AgentVersion], AgentVersion] | None = None
) -> AgentVersion:
    """Load a template YAML idempotently and publish it; returns the matching (or new) version.

    A version with the same config hash that is already published means nothing
    to do. An invalid template is stored as a draft with its errors and not
    published. `publisher` lets the seed command publish through the gate.
    """
    source = Path(path).read_text()
    result = validate_source(source)
    slug = result.config.slug if result.ok else _guess_slug(source, fallback=Path(path).stem)
    agent = Agent.objects.filter(organization__isnull=True, slug=slug).first()
    if agent is None:
        agent = create_agent(None, slug=slug, name=result.config.name if result.ok else slug)
    return load_source(agent, source=source, publisher=publisher)


def follow_template(
    template_version: AgentVersion,
    *,
    organization: Organization,
    publisher: Callable[[AgentVersion], AgentVersion] | None = None,
) -> AgentVersion:
    """Make `organization`'s copy of a template carry the template version's config (the seed's demo copies).

    Creates the copy when missing; idempotent like `load_template`.
    """
    template = template_version.agent
    agent = Agent.objects.filter(organization=organization, slug=template.slug).first()
    if agent is None:
        agent = create_agent(organization, slug=template.slug, name=template.name, description=template.description)
    return load_source(agent, source=template_version.source, publisher=publisher)


def load_source(
    agent: Agent, *, source: str, publisher: Callable[[AgentVersion], AgentVersion] | None = None
) -> AgentVersion:
    """The agent's version holding `source` (by config hash), drafted and published when there is none."""
    result = _check(source, agent=agent)
    same = AgentVersion.objects.filter(agent=agent, source=source).order_by("-number").first()
    if result.ok:
        plan_hash = config_hash(compile_config(result.config))
        same = AgentVersion.objects.filter(agent=agent, config_hash=plan_hash).order_by("-number").first()
    if same is None or same.status == VersionStatus.RETIRED:
        same = create_draft(agent, source=source)
    if same.status == VersionStatus.DRAFT and same.is_valid:
        return (publisher or publish)(same)
    return same


def latest_version(agent: Agent) -> AgentVersion | None:
    return AgentVersion.objects.filter(agent=agent).order_by("-number").first()


def latest_published(agent: Agent) -> AgentVersion | None:
    return AgentVersion.objects.filter(agent=agent, status=VersionStatus.PUBLISHED).order_by("-number").first()


def _lock(version: AgentVersion) -> AgentVersion:
    return AgentVersion.objects.select_for_update(no_key=True).get(pk=version.pk)


def _check(source: str, *, agent: Agent) -> ValidationResult:
    result = validate_source(source)
    if result.ok and result.config.slug != agent.slug:
        # A version cannot move to another agent by renaming its slug.
        mismatch = ConfigError("slug", f"slug {result.config.slug!r} is not this agent's", f"use `slug: {agent.slug}`")
        return ValidationResult(errors=[mismatch])
    return result


def _apply_source(version: AgentVersion, source: str) -> None:
    result = _check(source, agent=version.agent)
    version.source = source
    if result.ok:
        version.compiled = compile_config(result.config)
        version.config_hash = config_hash(version.compiled)
        version.validation_errors = []
    else:
        version.compiled = None
        version.config_hash = ""
        version.validation_errors = _error_dicts(result.errors)


def _follow_config(version: AgentVersion) -> None:
    # The agent's name and description are the ones its newest valid config states.
    if version.compiled is None:
        return
    name, description = version.compiled["name"], version.compiled.get("description") or ""
    Agent.objects.filter(pk=version.agent_id).exclude(name=name, description=description).update(
        name=name, description=description
    )
    version.agent.name, version.agent.description = name, description


def _stored_result_differs(version: AgentVersion, result: ValidationResult) -> bool:
    if not result.ok:
        return version.validation_errors != _error_dicts(result.errors)
    return bool(version.validation_errors) or version.config_hash != config_hash(compile_config(result.config))


def _error_dicts(errors: list[ConfigError]) -> list[dict]:
    return [error.as_dict() for error in errors]


def _guess_slug(source: str, *, fallback: str) -> str:
    # An invalid template still belongs to an agent: use its `slug:` if readable.
    try:
        data = yaml_source.load(source)
    except yaml_source.SourceError:
        return fallback
    slug = data.get("slug") if isinstance(data, dict) else None
    return slug if isinstance(slug, str) and slug else fallback
