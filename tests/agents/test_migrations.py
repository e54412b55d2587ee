"""The data migrations of tenant-owned agents, run forward over rows in the old shape."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BEFORE = [("agents", "0003_agent_organization"), ("runs", "0004_outbox_not_before")]
AFTER = [("agents", "0004_organization_copies_of_deployed_templates"), ("runs", "0005_actor_references")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def old_apps():
    apps = migrate(BEFORE)
    yield apps
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_deployed_templates_become_the_organizations_own_copies_and_keys_become_references(old_apps):
    apps = old_apps
    Organization, Agent = apps.get_model("agents", "Organization"), apps.get_model("agents", "Agent")
    AgentVersion, Deployment = apps.get_model("agents", "AgentVersion"), apps.get_model("agents", "Deployment")
    ApiKey = apps.get_model("agents", "ApiKey")
    Run, Escalation = apps.get_model("runs", "Run"), apps.get_model("runs", "Escalation")

    demo = Organization.objects.create(slug="demo", name="Demo")
    sim = Organization.objects.create(slug="demo-sim", name="Demo (simulation)")
    template = Agent.objects.create(slug="w9", name="W-9")
    plan = {"slug": "w9", "name": "W-9"}
    v1, v2 = (AgentVersion.objects.create(agent=template, number=n, status="published", source=f"# v{n}",
                                          compiled=plan, config_hash=f"hash-{n}", gate_scorecard={"passed": True})
              for n in (1, 2))
    old = Deployment.objects.create(organization=demo, agent=template, version=v1, active=False)
    active = Deployment.objects.create(organization=demo, agent=template, version=v2)
    real = Run.objects.create(organization=demo, version=v2, deployment=active, goal="W-9", plan=plan)
    simulated = Run.objects.create(organization=sim, version=v1, goal="sim", plan=plan, sim=True)
    key = ApiKey.objects.create(organization=demo, name="crm", hashed_key="x" * 64, prefix="lucia_x")
    answered = Escalation.objects.create(organization=demo, run=real, kind="question", prompt="?",
                                         status="answered", answer="yes", answered_via="api:crm")
    by_admin = Escalation.objects.create(organization=demo, run=real, kind="question", prompt="?",
                                         status="answered", answer="no", answered_via="admin")

    apps = migrate(AFTER)
    Agent, AgentVersion = apps.get_model("agents", "Agent"), apps.get_model("agents", "AgentVersion")
    Deployment, Run = apps.get_model("agents", "Deployment"), apps.get_model("runs", "Run")
    Escalation = apps.get_model("runs", "Escalation")

    copy = Agent.objects.get(organization_id=demo.pk, slug="w9")
    assert Agent.objects.get(pk=template.pk).organization_id is None
    copies = {v.number: v for v in AgentVersion.objects.filter(agent_id=copy.pk)}
    assert sorted(copies) == [1, 2]
    assert all((c.status, c.compiled, c.gate_scorecard) == ("published", plan, {"passed": True})
               for c in copies.values())
    assert (copies[2].source, copies[2].config_hash) == ("# v2", "hash-2")
    moved = {d.pk: (d.agent_id, d.version_id, d.active) for d in Deployment.objects.all()}
    assert moved == {old.pk: (copy.pk, copies[1].pk, False), active.pk: (copy.pk, copies[2].pk, True)}
    assert (Run.objects.get(pk=real.pk).version_id, Run.objects.get(pk=real.pk).deployment_id) == (
        copies[2].pk, active.pk)
    assert Run.objects.get(pk=simulated.pk).version_id == v1.pk  # simulations keep the template they ran
    assert AgentVersion.objects.filter(agent_id=template.pk).count() == 2
    answered = Escalation.objects.get(pk=answered.pk)
    assert (answered.answered_via, answered.answered_by_key_id) == ("api", key.pk)
    assert Escalation.objects.get(pk=by_admin.pk).answered_via == "admin"
