"""The "09:00 burst" of `manage.py bench`: thousands of sleeping runs fall due at once; two workers drain them.

One real run is started and its start episode run, so it sleeps on its first
follow-up like every customer run between chases. It is then copied in SQL
(`clone_runs`: the run row, its contacts with addresses of their own, its
tasks and its queued follow-up) N times, and every copy's follow-up is made
due at the same instant — the business morning. The real worker processes
(`manage.py runworkers`, LUCIA_Q_WORKERS=2: the supervisor's dispatch tick,
django-q2's queue, advance_run) then drain them. Figures: episodes per second
from the first start to the last finish, and the due-lag (started - due) p50,
p95 and max.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone
from django_q.models import OrmQ

from agents.models import AgentVersion, Organization
from runs import starts, worker
from runs.models import Contact, Episode, EpisodeStatus, Run, Task
from simulator import bench_copies

DRAIN_TIMEOUT_S = 3600
PR_SET_PDEATHSIG = 1  # prctl(2)
# Zones tried for the contacts, so that "now" is within business hours in one of them whatever the hour of the
# bench: a follow-up out of hours would only be deferred, and the burst is about sending.
ZONES = ["Pacific/Auckland", "Asia/Tokyo", "Asia/Kolkata", "Europe/Berlin", "Europe/London", "America/Sao_Paulo",
         "America/New_York", "America/Chicago", "America/Los_Angeles", "Pacific/Honolulu"]


@dataclass(frozen=True)
class Burst:
    runs: int
    done: int
    failed: int
    episodes_per_s: float
    p50_s: float
    p95_s: float
    max_s: float


def measure(version: AgentVersion, organization: Organization, *, runs: int, contact: dict, inputs: dict,
            say: Callable[[str], None]) -> Burst:
    """`organization` must be a sandbox with `version` deployed (its sends are only stored)."""
    contact = {**contact, "timezone": working_zone(timezone.now())}
    template = starts.start_run(organization, version=version, goal="bench 09:00 burst", contacts=[contact],
                                inputs=inputs)
    worker.advance_run(template.pk, owner="bench-burst")  # the start episode: the run now sleeps on a follow-up
    started = time.perf_counter()
    run_ids = clone_runs(template.pk, count=runs)
    Episode.objects.filter(run_id=template.pk).delete()  # the template's own follow-up is not part of the burst
    say(f"  copied {len(run_ids):,} sleeping runs in {time.perf_counter() - started:.1f}s; "
        f"draining with runworkers (2 worker processes)")
    due_at = make_due(run_ids)
    # The episodes made due, not later ones: each follow-up done schedules the run's next (days ahead).
    followups = Episode.objects.filter(pk__in=list(
        Episode.objects.filter(run_id__in=run_ids, status=EpisodeStatus.QUEUED).values_list("pk", flat=True)))
    # The queue holds what only this process may run: django-q2 signs each task with SECRET_KEY, and a development
    # bench's workers have a key of their own (worker_environment). The template's task ran here already.
    OrmQ.objects.all().delete()
    workers = _start_workers()
    try:
        drained = _wait_for_drain(followups, total=len(run_ids), workers=workers, say=say)
    finally:
        _stop_workers(workers)
        OrmQ.objects.all().delete()  # what the workers left (signed with their key) is nobody else's to run
    if not drained:
        workers.log.seek(0)
        tail = workers.log.read().decode(errors="replace").splitlines()[-20:]
        say("  the workers' log ends with:\n" + "\n".join(tail))
    rows = list(followups.exclude(started_at=None).values_list("started_at", "finished_at", "status"))
    lags = sorted((started_at - due_at).total_seconds() for started_at, _, _ in rows)
    finished = [finished_at for _, finished_at, _ in rows if finished_at is not None]
    span = (max(finished) - min(started_at for started_at, _, _ in rows)).total_seconds() if finished else 0.0
    done = sum(1 for *_, status in rows if status == EpisodeStatus.DONE)
    failed = sum(1 for *_, status in rows if status == EpisodeStatus.FAILED)
    if not lags:
        return Burst(runs, 0, 0, 0.0, float("inf"), float("inf"), float("inf"))
    return Burst(runs=runs, done=done, failed=failed, episodes_per_s=len(finished) / span if span else 0.0,
                 p50_s=statistics.median(lags), p95_s=lags[min(len(lags) - 1, int(0.95 * len(lags)))],
                 max_s=lags[-1])


def working_zone(now: datetime) -> str:
    """A zone of ZONES where `now` is between 10:00 and 16:00: there is one at every hour (two neighbours in UTC
    offset are at most 4.5 hours apart, counted around the clock). The day there may be any day of the week: the
    bench's agent takes every day as a business day (bench._every_day)."""
    return next(zone for zone in ZONES if 10 <= now.astimezone(ZoneInfo(zone)).hour < 16)


def clone_runs(template_id: int, *, count: int) -> list[int]:
    """`count` copies of run `template_id` with its contacts, tasks and queued episodes; returns the new run ids.

    Each copy's contacts get addresses of their own, so per-contact caps and suppressions see different people.
    """
    with connection.cursor() as cursor:
        run_ids = bench_copies.copy_runs(cursor, template_id, count=count)
        for model, overrides, where in [(Contact, bench_copies.addresses("burst", phone_prefix="+1555"), ""),
                                        (Task, {}, ""), (Episode, {}, f" AND t.status = '{EpisodeStatus.QUEUED}'")]:
            bench_copies.copy_run_rows(cursor, model, template_id, run_ids, overrides=overrides, where=where)
    return run_ids


def make_due(run_ids: list[int]) -> datetime:
    """Every queued episode of these runs, and the runs' wake-up, due at one instant (returned)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
    Episode.objects.filter(run_id__in=run_ids, status=EpisodeStatus.QUEUED).update(due_at=now)
    Run.objects.filter(pk__in=run_ids).update(next_wake_at=now, advance_enqueued_at=None)
    return now


def _start_workers() -> subprocess.Popen:
    """`manage.py runworkers` on the bench's database, its log in a temporary file (printed if it fails)."""
    database = connection.settings_dict
    user, host, port = database.get("USER") or "", database.get("HOST") or "", database.get("PORT") or 5432
    if host.startswith("/"):  # a unix socket directory (the embedded PostgreSQL)
        url = f"postgresql://{user}@/{database['NAME']}?host={host}&port={port}"
    else:
        url = f"postgresql://{user}@{host}:{port}/{database['NAME']}"
    env = worker_environment(url)
    connections.close_all()
    log = tempfile.TemporaryFile()
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runworkers"]
    workers = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603 - our own command
                               start_new_session=True, preexec_fn=_stop_with_parent)
    workers.log = log
    return workers


def worker_environment(database_url: str) -> dict[str, str]:
    """The environment of the burst's workers: the bench's database, two workers, and DEBUG off as in production.

    `make bench` runs with DJANGO_DEBUG=true for the bench's own settings (it turns DEBUG off for what it measures
    in its own process), and a child inherits it: its workers then logged every query, the hot path's statements
    through the query-logging wrapper (runs.statements). With DEBUG off a process refuses the public development
    key, so a development bench hands them a key of their own, and keeps the one the organization's identity
    secrets were encrypted with (connectors.secrets) as LUCIA_SECRETS_KEY."""
    env = {**os.environ, "DATABASE_URL": database_url, "LUCIA_Q_WORKERS": "2", "DJANGO_DEBUG": "false"}
    if settings.SECRET_KEY == settings.INSECURE_SECRET_KEY:
        env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
        env["LUCIA_SECRETS_KEY"] = settings.LUCIA_SECRETS_KEY or settings.SECRET_KEY
    return env


def _stop_with_parent() -> None:
    """In the child before exec: Linux sends it SIGTERM if the bench dies (killed, timed out) without stopping it."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_for_drain(followups, *, total: int, workers: subprocess.Popen, say: Callable[[str], None]) -> bool:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    last_report = 0.0
    while time.monotonic() < deadline:
        left = followups.filter(status__in=[EpisodeStatus.QUEUED, EpisodeStatus.RUNNING]).count()
        if time.monotonic() - last_report >= 10 or not left:
            say(f"  burst: {total - left:,}/{total:,} follow-ups done")
            last_report = time.monotonic()
        if not left:
            return True
        if workers.poll() is not None:
            say(f"  burst: the workers exited with code {workers.returncode}")
            return False
        time.sleep(1.0)
    say(f"  burst: gave up after {DRAIN_TIMEOUT_S} s")
    return False


def _stop_workers(workers: subprocess.Popen) -> None:
    os.killpg(workers.pid, signal.SIGTERM)
    try:
        workers.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(workers.pid, signal.SIGKILL)
        workers.wait()
