"""Real worker clusters for tests: `manage.py runworkers` on the test database, and ways to hurt them.

Imported by the cluster subprocesses too (`hold` is a task they run), so nothing
here imports pytest.
"""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"ready for work at (\d+)")
MONITORING = re.compile(r"monitoring at (\d+)")


def cluster_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    db = settings.DATABASES["default"]
    url = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}"
    if db.get("PORT"):
        url = f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SECRET_KEY": settings.SECRET_KEY, "DJANGO_DEBUG": "true",
            "LUCIA_Q_WORKERS": "1", "LUCIA_LLM": "scripted", **(extra or {})}


def start_supervised(log: Path, *, name: str, stall_after: int, extra_env: dict[str, str] | None = None
                     ) -> subprocess.Popen:
    """`runworkers` checking every second; its output (and qcluster's) goes to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(  # noqa: S603 (fixed argv)
            [sys.executable, "manage.py", "runworkers", "--name", name, "--stall-after", str(stall_after),
             "--check-every", "1"],
            cwd=ROOT, env=cluster_env(extra_env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def stop_supervised(process: subprocess.Popen, *, qcluster_pids: list[int]) -> None:
    """SIGTERM the supervisor (it stops its qcluster); kill whatever is left."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    for pid in qcluster_pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def wait_for(predicate, *, seconds: float = 60) -> bool:
    """Poll a condition until it holds or the deadline passes."""
    tick = threading.Event()
    for _ in range(int(seconds / 0.2)):
        if predicate():
            return True
        tick.wait(0.2)
    return False


def idle_worker_pids(log: Path, *, qcluster_pid: int) -> list[int]:
    """Live worker processes of the qcluster (they log "ready for work at <pid>")."""
    try:
        descendants = {p.pid for p in psutil.Process(qcluster_pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return []
    return [pid for pid in map(int, READY.findall(log.read_text(errors="replace"))) if pid in descendants]


def hold(marker: str) -> None:
    """A task that keeps its worker busy: it writes its pid to `marker` and waits (to be killed)."""
    from runs import heartbeats

    with heartbeats.beat():
        Path(marker).write_text(str(os.getpid()))
        threading.Event().wait(120)


def real_run(*, like=None):
    """A real (non-simulated) run whose start episode is due now; on any day and hour, as the test runs live.

    `like`: another run of the same organization and version (a test that needs two on one cluster).
    """
    from connectors import identities
    from runs import starts
    from tests.factories import OrganizationFactory, deployed_agent, draft_version

    if like is not None:
        return starts.start_run(like.organization, version=like.version, goal="Collect the W-9 again", contacts=[
            {"role": "vendor", "email": "vendor-two@example.com", "timezone": "America/New_York"}])
    plan = draft_version().compiled
    plan["followup"].update(business_days=list(range(7)), business_hours={"start": "00:00", "end": "23:59"})
    plan["compliance"]["quiet_hours"] = None
    # A sandbox organization: its identity only stores the sends, and the run starts on its own deployment.
    organization = OrganizationFactory(sandbox=True)
    version = deployed_agent(plan, organization=organization)[1].version
    identities.create_identity(organization, channel="email", address="ap@acme.test", sandbox=True)
    return starts.start_run(organization, version=version, goal="Collect the W-9", contacts=[
        {"role": "vendor", "email": "vendor@example.com", "timezone": "America/New_York"}])


def worker_pid(cluster: str, log: Path) -> int | None:
    """The newest live worker of the supervised cluster's current qcluster, once it has registered."""
    from runs.models import ClusterHeartbeat

    row = ClusterHeartbeat.objects.filter(cluster=cluster).first()
    if row is None or row.pid is None:
        return None
    pids = idle_worker_pids(log, qcluster_pid=row.pid)
    return pids[-1] if pids else None


def blocked_in(pid: int, *kernel_waits: str) -> bool:
    """The process sleeps in one of these kernel waits (/proc/<pid>/wchan), e.g. "pipe_read", "poll".

    An idle django-q2 worker sleeps in the task pipe's read while it holds the queue's
    reader lock; a lock-free one sleeps in poll(). Killing it there is killing it idle.
    """
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return any(wait in wchan for wait in kernel_waits)


def monitor_pid(cluster: str, log: Path) -> int | None:
    """The live monitor of the supervised cluster's current qcluster (it logs "monitoring at <pid>")."""
    from runs.models import ClusterHeartbeat

    row = ClusterHeartbeat.objects.filter(cluster=cluster).first()
    if row is None or row.pid is None:
        return None
    try:
        descendants = {p.pid for p in psutil.Process(row.pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return None
    pids = [pid for pid in map(int, MONITORING.findall(log.read_text(errors="replace"))) if pid in descendants]
    return pids[-1] if pids else None
