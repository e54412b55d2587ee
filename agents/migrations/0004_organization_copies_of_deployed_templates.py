"""Agents became tenant-owned: every agent that existed is now a template (no organization).

An organization may deploy only its own agents, so each organization that
deployed a template (the demo organization, after `manage.py seed`) gets its
own copy of that agent with the deployed versions (same numbers, config and
gate evidence), and its deployments move to the copies. Real runs pinned to a
template version move to the organization's copy of that version: same plan,
same number, so nothing a run reads changes. Simulated runs and scorecards
keep pointing at the templates they simulated.
"""

from django.db import migrations

VERSION_FIELDS = ("status", "source", "compiled", "config_hash", "validation_errors", "gate_scorecard",
                  "created_by_id", "published_at")


def copy_deployed_templates(apps, schema_editor) -> None:
    Agent = apps.get_model("agents", "Agent")
    AgentVersion = apps.get_model("agents", "AgentVersion")
    Deployment = apps.get_model("agents", "Deployment")
    Run = apps.get_model("runs", "Run")

    def own_version(organization_id: int, template_version) -> object:
        template = template_version.agent
        agent, _ = Agent.objects.get_or_create(
            organization_id=organization_id, slug=template.slug,
            defaults={"name": template.name, "description": template.description},
        )
        copy = AgentVersion.objects.filter(agent=agent, number=template_version.number).first()
        if copy is None:
            fields = {name: getattr(template_version, name) for name in VERSION_FIELDS}
            copy = AgentVersion.objects.create(agent=agent, number=template_version.number, **fields)
        return copy

    deployments = Deployment.objects.filter(agent__organization__isnull=True).select_related("version__agent")
    for deployment in deployments.order_by("id"):
        copy = own_version(deployment.organization_id, deployment.version)
        Deployment.objects.filter(pk=deployment.pk).update(agent_id=copy.agent_id, version_id=copy.pk)
    runs = Run.objects.filter(sim=False, version__agent__organization__isnull=True).select_related("version__agent")
    for run in runs.order_by("id"):
        copy = own_version(run.organization_id, run.version)
        Run.objects.filter(pk=run.pk).update(version_id=copy.pk)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_agent_organization"),
        ("runs", "0001_initial"),
    ]

    operations = [
        # Not reversible into the old global slugs once copies exist; going back leaves the copies.
        migrations.RunPython(copy_deployed_templates, migrations.RunPython.noop),
    ]
