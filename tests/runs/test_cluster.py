"""End to end with a real django-q2 cluster (a subprocess) on the test database."""

import base64
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from connectors import identities
from runs import starts, tasks
from runs.models import Episode, EpisodeStatus, OutboxMessage
from simulator import documents
from tests.factories import AgentFactory, OrganizationFactory, deployed_agent, draft_version, plan_version

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def _start_cluster(extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    db = settings.DATABASES["default"]
    url = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}"
    if db.get("PORT"):
        url = f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SECRET_KEY": settings.SECRET_KEY, "DJANGO_DEBUG": "true",
           "LUCIA_Q_WORKERS": "1", "LUCIA_LLM": "scripted", **(extra_env or {})}
    return subprocess.Popen(  # noqa: S603 (fixed argv)
        [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


@pytest.fixture
def cluster():
    process = _start_cluster()
    yield process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def _wait_for(predicate, *, seconds: float = 60) -> bool:
    tick = threading.Event()
    for _ in range(int(seconds / 0.2)):
        if predicate():
            return True
        tick.wait(0.2)
    return False


def _real_run():
    plan = draft_version().compiled
    # Any day, any hour: the test runs on the wall clock.
    plan["followup"].update(business_days=list(range(7)), business_hours={"start": "00:00", "end": "23:59"})
    plan["compliance"]["quiet_hours"] = None
    # A real run sends through the organization's identity; a sandbox one (only a simulation
    # organization may hold one) stores the sends.
    organization = OrganizationFactory(slug="cluster-sim")
    _, deployment = deployed_agent(plan, organization=organization)
    version = deployment.version
    identities.create_identity(organization, channel="email", address="ap@acme.test", sandbox=True)
    return starts.start_run(organization, version=version, goal="Collect the W-9", contacts=[
        {"role": "vendor", "email": "vendor@example.com", "timezone": "America/New_York"}])


def test_the_cluster_runs_a_started_run_and_resumes_an_episode_whose_worker_died(cluster):
    run = _real_run()
    start = Episode.objects.get(run=run, kind="start")
    assert _wait_for(lambda: Episode.objects.get(pk=start.pk).status == EpisodeStatus.DONE)
    assert OutboxMessage.objects.filter(run=run, status="sent").count() == 1

    # A worker died mid-episode: its episode is running under a lease that has expired.
    followup = Episode.objects.get(run=run, kind="followup", status=EpisodeStatus.QUEUED)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET lease_owner = 'dead', lease_epoch = lease_epoch + 1,"
            " lease_expires_at = now() - interval '1 second' WHERE id = %s RETURNING lease_epoch", [run.pk])
        epoch = cursor.fetchone()[0]
        cursor.execute(
            "UPDATE runs_episode SET status = 'running', attempts = 1, lease_epoch = %s, due_at = now()"
            " WHERE id = %s", [epoch, followup.pk])

    assert tasks.dispatch_due()["reaped"] == 1

    assert _wait_for(lambda: Episode.objects.get(pk=followup.pk).status == EpisodeStatus.DONE)
    assert Episode.objects.get(pk=followup.pk).attempts == 2
    assert OutboxMessage.objects.filter(run=run, status="sent").count() == 2
    assert cluster.poll() is None


@pytest.fixture
def crashing_cluster(tmp_path):
    """A cluster whose worker dies (os._exit, as SIGKILL) right after its first provider call."""
    process = _start_cluster({"LUCIA_FAULTS": "after_provider_call:once", "LUCIA_FAULTS_DIR": str(tmp_path)})
    yield process, tmp_path
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def test_a_run_started_through_the_api_survives_a_killed_worker_and_completes_on_its_evidence(crashing_cluster):
    from rest_framework.test import APIClient

    from agents.models import Deployment
    from connectors.models import SandboxMessage
    from runs.models import Run
    from tests.factories import api_key_for

    process, faults_dir = crashing_cluster
    plan = draft_version().compiled
    plan["followup"].update(business_days=list(range(7)), business_hours={"start": "00:00", "end": "23:59"})
    plan["compliance"]["quiet_hours"] = None
    organization = OrganizationFactory(slug="cluster-api-sim")
    version = plan_version(plan, agent=AgentFactory(organization=organization))
    Deployment.objects.create(organization=organization, agent=version.agent, version=version)
    identities.create_identity(organization, channel="email", address="ap@acme.test", sandbox=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization)}")

    started = client.post("/api/v1/runs/", {"agent": version.agent.slug, "goal": "Collect the W-9", "contacts": [
        {"role": "vendor", "email": "vendor@example.com", "timezone": "America/New_York"}]}, format="json")
    assert started.status_code == 201, started.content
    run_id = started.json()["id"]

    # The worker sent the first email, then died before recording it: the episode is left running.
    assert _wait_for(lambda: (faults_dir / "after_provider_call.fired").exists())
    start = Episode.objects.get(run_id=run_id, kind="start")
    assert _wait_for(lambda: SandboxMessage.objects.count() == 1)
    assert Episode.objects.get(pk=start.pk).status == EpisodeStatus.RUNNING
    assert OutboxMessage.objects.get(run_id=run_id).status == "sending"

    # Time passes (controlled: the dead worker's lease is expired in SQL), the dispatcher reaps and re-enqueues.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [run_id])
    assert tasks.dispatch_due()["reaped"] == 1

    # The cluster resumes: the sandbox says the key was sent, so the send is adopted, never repeated.
    assert _wait_for(lambda: Episode.objects.get(pk=start.pk).status == EpisodeStatus.DONE)
    assert SandboxMessage.objects.count() == 1
    assert OutboxMessage.objects.get(run_id=run_id).status == "sent"
    assert Run.objects.get(pk=run_id).wake_when.startswith("followup")

    # The vendor's reply with the PDF arrives as an event; the run completes on that evidence.
    reply = client.post(f"/api/v1/runs/{run_id}/events/", {
        "dedupe_key": "mail-1", "kind": "inbound", "channel": "email", "text": "Here it is",
        "sender": "vendor@example.com", "attachments": [{
            "filename": "w9-signed.pdf", "content_type": "application/pdf",
            "content_b64": base64.b64encode(documents.pdf_bytes(title="W-9")).decode()}]}, format="json")
    assert reply.status_code == 201
    assert _wait_for(lambda: Run.objects.get(pk=run_id).status == "completed")
    assert Run.objects.get(pk=run_id).tasks.get().status == "done"
    assert process.poll() is None
