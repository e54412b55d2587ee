"""Plans of the hot path's statements as a 09:00 burst would see them (tests/runs/test_episode_loads.py,
tests/runs/test_execution_plans.py)."""

from __future__ import annotations

from django.db import connection

from runs.models import Episode, EpisodeKind, EpisodeStatus
from tests.runs import loop_helpers


def plan_with_quiet_statistics(sql: str, params: dict) -> str:
    """`sql`'s plan when the statistics were taken in a quiet hour (no episode queued or running anywhere) and
    other runs' episodes have fallen due or started since, indexes preferred to scans as on a large table."""
    quiet = loop_helpers.make_run()
    for _ in range(20):
        Episode.objects.filter(pk=loop_helpers.add_episode(quiet, EpisodeKind.EVENT).pk).update(
            status=EpisodeStatus.DONE)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_episode")
    for status in (EpisodeStatus.QUEUED, EpisodeStatus.RUNNING) * 10:
        other = loop_helpers.make_run(status="waiting", wake_when="followup:1")
        Episode.objects.filter(pk=loop_helpers.add_episode(other, EpisodeKind.FOLLOWUP).pk).update(status=status)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())
