"""Fixtures of the runtime's tests: real worker clusters, a leased run."""

import uuid

import pytest

from runs import leases
from runs.models import ClusterHeartbeat
from tests.factories import EpisodeFactory, RunFactory
from tests.runs import cluster_helpers as clusters


@pytest.fixture
def supervised(tmp_path):
    """Start `runworkers` (call with stall_after and env); the supervisor and every qcluster are gone afterwards."""
    started = []

    def start(*, stall_after: int = 5, env: dict[str, str] | None = None):
        name = f"test-{uuid.uuid4().hex[:8]}"
        log = tmp_path / f"{name}.log"
        process = clusters.start_supervised(log, name=name, stall_after=stall_after, extra_env=env)
        started.append((process, name))
        assert clusters.wait_for(lambda: clusters.worker_pid(name, log) is not None, seconds=40), log.read_text()
        return name, log

    yield start
    for process, name in started:
        pids = list(ClusterHeartbeat.objects.filter(cluster=name).values_list("pid", flat=True))
        clusters.stop_supervised(process, qcluster_pids=[pid for pid in pids if pid])


@pytest.fixture
def leased_run():
    """(run, epoch, episode): a run whose lease this test holds."""
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="test-worker")
    return run, epoch, EpisodeFactory(run=run, kind="start")
