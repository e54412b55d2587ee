"""Raw SQL for `manage.py bench`: bulk rows and the baseline episode cycle the runtime is measured against.

Only the bench's throwaway database ever sees these statements.
"""

from __future__ import annotations

from django.db import connection, transaction

# One statement per batch: the runs and their one queued episode each (sleeping: due tomorrow onwards).
INSERT_RUNS_SQL = """
WITH new_runs AS (
    INSERT INTO runs_run (sim, external_ref, goal, inputs, plan, state, status, wake_when, next_wake_at,
                          lease_epoch, step_budget, steps_used, token_budget, tokens_used, cost_budget, cost_used,
                          outcome, created_at, updated_at, organization_id, version_id)
    SELECT %(sim)s, '', 'bench', '{}', '{}', '{"v": 1}', %(status)s, 'followup:bench',
           CASE WHEN %(due)s THEN statement_timestamp() - interval '1 minute'
                ELSE statement_timestamp() + interval '1 day' + g * interval '1 second' END,
           0, 100, 0, 100000, 0, 1, 0, '', statement_timestamp(), statement_timestamp(),
           %(organization_id)s, %(version_id)s
      FROM generate_series(1, %(count)s) AS g
    RETURNING id, next_wake_at
)
INSERT INTO runs_episode (run_id, seq, kind, payload, dedupe_key, status, due_at, attempts, created_at, error)
SELECT id, 1, 'followup', '{}', 'bench', 'queued', next_wake_at, 0, statement_timestamp(), '' FROM new_runs
RETURNING run_id
"""

CLAIM_SQL = """
UPDATE runs_run SET lease_owner = 'bench-raw', lease_epoch = lease_epoch + 1,
       lease_expires_at = statement_timestamp() + interval '90 seconds'
 WHERE id = %s AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp())
RETURNING lease_epoch
"""
FENCE_SQL = "SELECT lease_epoch FROM runs_run WHERE id = %s FOR NO KEY UPDATE"
NEXT_SQL = """
SELECT id FROM runs_episode WHERE run_id = %s AND status = 'queued' AND due_at <= statement_timestamp()
 ORDER BY seq LIMIT 1
"""
START_SQL = """
UPDATE runs_episode SET status = 'running', started_at = statement_timestamp(), lease_epoch = %s,
       attempts = attempts + 1 WHERE id = %s
"""
JOURNAL_SQL = """
INSERT INTO runs_journalentry (run_id, episode_id, seq, kind, data, request_hash, model_name, model_provider,
                               tokens_in, tokens_out, cost, at, created_at)
SELECT %s, %s, coalesce(max(seq), 0) + 1, 'note', '{"bench": true}', '', '', '', 0, 0, 0,
       statement_timestamp(), statement_timestamp()
  FROM runs_journalentry WHERE run_id = %s
"""
CLOSE_EPISODE_SQL = "UPDATE runs_episode SET status = 'done', finished_at = statement_timestamp() WHERE id = %s"
CLOSE_RUN_SQL = "UPDATE runs_run SET status = 'waiting', updated_at = statement_timestamp() WHERE id = %s"
RELEASE_SQL = "UPDATE runs_run SET lease_owner = NULL, lease_expires_at = NULL WHERE id = %s AND lease_epoch = %s"


def insert_runs_with_due_episodes(*, organization_id: int, version_id: int, count: int) -> list[int]:
    """Simulated runs (the dispatcher skips them) with one episode due now each; returns their ids."""
    return _insert(organization_id=organization_id, version_id=version_id, count=count, due=True, sim=True)


def insert_dispatch_runs(*, organization_id: int, version_id: int, count: int, due: bool) -> None:
    """Real runs the dispatcher sees: due now (active) or sleeping on a future follow-up (waiting)."""
    if count:
        _insert(organization_id=organization_id, version_id=version_id, count=count, due=due, sim=False)


def raw_cycle(run_id: int) -> int:
    """Claim, mark the due episode running, append one journal entry, close it, release; each write fenced.

    Returns 1 when an episode was closed, 0 when there was nothing to do.
    """
    with connection.cursor() as cursor:
        with transaction.atomic():
            cursor.execute(CLAIM_SQL, [run_id])
            row = cursor.fetchone()
        if row is None:
            return 0
        epoch = row[0]
        with transaction.atomic():
            _fence(cursor, run_id, epoch)
            cursor.execute(NEXT_SQL, [run_id])
            found = cursor.fetchone()
            if found is not None:
                cursor.execute(START_SQL, [epoch, found[0]])
        if found is not None:
            with transaction.atomic():
                _fence(cursor, run_id, epoch)
                cursor.execute(JOURNAL_SQL, [run_id, found[0], run_id])
            with transaction.atomic():
                _fence(cursor, run_id, epoch)
                cursor.execute(CLOSE_EPISODE_SQL, [found[0]])
                cursor.execute(CLOSE_RUN_SQL, [run_id])
        with transaction.atomic():
            cursor.execute(RELEASE_SQL, [run_id, epoch])
    return 0 if found is None else 1


def analyze() -> None:
    # Fresh statistics after a bulk insert, as autovacuum would give a long-lived table.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
        cursor.execute("ANALYZE runs_episode")


def _fence(cursor, run_id: int, epoch: int) -> None:
    cursor.execute(FENCE_SQL, [run_id])
    if cursor.fetchone()[0] != epoch:
        raise RuntimeError(f"bench run {run_id}: lease epoch moved")


def _insert(*, organization_id: int, version_id: int, count: int, due: bool, sim: bool) -> list[int]:
    params = {"organization_id": organization_id, "version_id": version_id, "count": count, "due": due,
              "sim": sim, "status": "active" if due else "waiting"}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(INSERT_RUNS_SQL, params)
        return [row[0] for row in cursor.fetchall()]
