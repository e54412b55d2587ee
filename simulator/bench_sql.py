"""Raw SQL for `manage.py bench`: sleeping and due runs in bulk, for the dispatcher figure.

Only the bench's throwaway database ever sees these statements.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction

# One statement per batch: the runs and their one queued episode each (sleeping: due tomorrow onwards).
INSERT_RUNS_SQL = """
WITH new_runs AS (
    INSERT INTO runs_run (sim, external_ref, goal, inputs, plan, state, status, wake_when, next_wake_at,
                          lease_epoch, step_budget, steps_used, token_budget, tokens_used, cost_budget, cost_used,
                          outcome, created_at, updated_at, organization_id, version_id)
    SELECT false, '', 'bench', '{}', '{}', '{"v": 1}', %(status)s, 'followup:bench',
           CASE WHEN %(due)s THEN statement_timestamp() - interval '1 minute'
                ELSE statement_timestamp() + interval '1 day' + (%(offset)s + g) * interval '1 second' END,
           0, 100, 0, 100000, 0, 1, 0, '', statement_timestamp(), statement_timestamp(),
           %(organization_id)s, %(version_id)s
      FROM generate_series(1, %(count)s) AS g
    RETURNING id, next_wake_at
)
INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, created_at, error)
SELECT id, 1, 'followup', '{}', 'bench', 'queued', next_wake_at, 0, statement_timestamp(), '' FROM new_runs
"""
# A million sleeping runs take about a minute: they go in batches of this many, each reported.
BATCH = 100_000


def insert_dispatch_runs(*, organization_id: int, version_id: int, count: int, due: bool,
                         progress: Callable[[int], None] | None = None) -> None:
    """Real runs the dispatcher sees: due now (active) or sleeping on a future follow-up (waiting), each batch in
    a transaction of its own; `progress` is told how many are in after each batch."""
    for offset in range(0, count, BATCH):
        params = {"organization_id": organization_id, "version_id": version_id, "count": min(BATCH, count - offset),
                  "offset": offset, "due": due, "status": "active" if due else "waiting"}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(INSERT_RUNS_SQL, params)
        if progress is not None:
            progress(offset + params["count"])


def analyze() -> None:
    """Fresh statistics for every table after bulk inserts, as autovacuum gives a long-lived database (the raw
    cycle's schema is analyzed too: plans are compared on the same footing)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
