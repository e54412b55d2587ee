"""The due-lag figure of `manage.py bench`: how late a follow-up due a few seconds ahead starts running.

Real (not simulated) runs get a follow-up due DELAY_S from now, spread over SPREAD_S. A loop then does what
the worker supervisor does: every TICK_S it calls `runs.dispatch.dispatch_due()`, and a worker takes the
queued advance_run tasks from django-q2's queue (here drained in this process, one worker, so the time spent
running episodes counts in the lag). The lag of an episode is when it started minus when it was due.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ

from agents.models import AgentVersion, Organization, VersionStatus
from runs import dispatch, events, starts, worker
from runs.models import Episode, EpisodeKind, EpisodeStatus, Run
from simulator import gate, scorecards

TICK_S = 2.0
DELAY_S = 2.0
SPREAD_S = 6.0


@dataclass(frozen=True)
class Lag:
    p50_s: float
    p95_s: float
    episodes: int


def measure(version: AgentVersion, organization: Organization, *, runs: int, contact: dict, inputs: dict,
            say: Callable[[str], None]) -> Lag:
    if version.status != VersionStatus.PUBLISHED:
        # Real runs need a published version: through the gate, as the seed command does.
        scorecards.score(version, organization=organization)
        version = gate.publish(version)
    run_ids = [starts.start_run(organization, version=version, goal="bench due-lag", contacts=[contact],
                                inputs=inputs).pk for _ in range(runs)]
    drain_queue()  # the start episodes, so only the follow-ups below are due
    now = timezone.now()
    episode_ids = []
    for index, run_id in enumerate(run_ids):
        due_at = now + timedelta(seconds=DELAY_S + SPREAD_S * index / max(runs - 1, 1))
        with transaction.atomic():
            run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
            episode = events.schedule_episode(run, kind=EpisodeKind.FOLLOWUP, due_at=due_at,
                                              dedupe_key="bench:due-lag", payload={"step": 1, "channel": "email"})
            Run.objects.filter(pk=run_id).update(next_wake_at=due_at)
        episode_ids.append(episode.pk)
    waiting = Episode.objects.filter(pk__in=episode_ids, status=EpisodeStatus.QUEUED)
    deadline = time.monotonic() + DELAY_S + SPREAD_S + 60
    while waiting.exists() and time.monotonic() < deadline:
        tick_started = time.monotonic()
        dispatch.dispatch_due()
        drain_queue()
        time.sleep(max(0.0, TICK_S - (time.monotonic() - tick_started)))
    lags = sorted((started - due).total_seconds() for started, due in Episode.objects.filter(
        pk__in=episode_ids, started_at__isnull=False).values_list("started_at", "due_at"))
    say(f"  {len(lags)} of {len(episode_ids)} follow-ups ran; tick {TICK_S:.0f} s, due {DELAY_S:.0f}-"
        f"{DELAY_S + SPREAD_S:.0f} s ahead")
    if not lags:
        return Lag(float("inf"), float("inf"), 0)
    return Lag(statistics.median(lags), lags[min(len(lags) - 1, int(0.95 * len(lags)))], len(lags))


def drain_queue() -> int:
    """Run every queued advance_run task in this process, as one django-q2 worker would; returns how many."""
    done = 0
    while True:
        rows = list(OrmQ.objects.order_by("id")[:100])
        if not rows:
            return done
        for row in rows:
            OrmQ.objects.filter(pk=row.pk).delete()
            task = row.task
            if task["func"] == "runs.tasks.advance_run":
                worker.advance_run(task["args"][0])
                done += 1
