"""The raw-SQL episode cycle of the reference baseline (`shared/baselines/psycopg_cycle.py`), in the bench's database.

The same three short transactions the runtime must do — claim (SKIP LOCKED,
lease epoch + 1), a fenced journal write, close + schedule the next + release —
in plain psycopg 3 with no ORM, on its own small schema (`bench_cycle_*`), run
by N forked processes for a fixed time. It is the ceiling the runtime is held
against: the runtime's figure is a ratio of this one, measured in the same run
with the same concurrency.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import psycopg
from django.db import connection, connections

from simulator import bench_cpu

SCHEMA_SQL = """
DROP TABLE IF EXISTS bench_cycle_journal, bench_cycle_episodes, bench_cycle_runs CASCADE;
CREATE TABLE bench_cycle_runs (
  id bigint PRIMARY KEY, state text NOT NULL DEFAULT 'running', lease_owner text,
  lease_epoch bigint NOT NULL DEFAULT 0, lease_expires_at timestamptz, step bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO bench_cycle_runs (id, step) SELECT g, 10 FROM generate_series(1, %(runs)s) g;
CREATE TABLE bench_cycle_episodes (
  id bigserial PRIMARY KEY, run_id bigint NOT NULL REFERENCES bench_cycle_runs(id), seq int NOT NULL,
  status text NOT NULL, due_at timestamptz NOT NULL, started_at timestamptz, finished_at timestamptz, worker text);
INSERT INTO bench_cycle_episodes (run_id, seq, status, due_at, started_at, finished_at, worker)
SELECT r, s, CASE WHEN s = 10 AND r %% 10 = 0 THEN 'due' ELSE 'done' END,
       now() - (10 - s) * interval '1 hour' - random() * interval '1 hour',
       CASE WHEN s = 10 AND r %% 10 = 0 THEN NULL ELSE now() - (10 - s) * interval '1 hour' END,
       CASE WHEN s = 10 AND r %% 10 = 0 THEN NULL ELSE now() - (10 - s) * interval '1 hour' END,
       CASE WHEN s = 10 AND r %% 10 = 0 THEN NULL ELSE 'seed' END
FROM generate_series(1, 10) s, generate_series(1, %(runs)s) r ORDER BY s, r;
CREATE INDEX ON bench_cycle_episodes (due_at) WHERE status = 'due';
CREATE INDEX ON bench_cycle_episodes (run_id);
CREATE TABLE bench_cycle_journal (
  id bigserial PRIMARY KEY, run_id bigint NOT NULL REFERENCES bench_cycle_runs(id),
  episode_id bigint NOT NULL REFERENCES bench_cycle_episodes(id), lease_epoch bigint NOT NULL, kind text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON bench_cycle_journal (run_id);
ANALYZE bench_cycle_runs; ANALYZE bench_cycle_episodes; ANALYZE bench_cycle_journal;
"""

CLAIM = """
SELECT e.id, e.run_id FROM bench_cycle_episodes e JOIN bench_cycle_runs r ON r.id = e.run_id
 WHERE e.status = 'due' AND e.due_at <= now() AND (r.lease_owner IS NULL OR r.lease_expires_at < now())
 ORDER BY e.due_at LIMIT 1 FOR UPDATE OF e SKIP LOCKED"""
LEASE = """
UPDATE bench_cycle_runs SET lease_owner = %s, lease_epoch = lease_epoch + 1,
       lease_expires_at = now() + interval '90 seconds'
 WHERE id = %s AND (lease_owner IS NULL OR lease_expires_at < now()) RETURNING lease_epoch"""
EPISODE_RUNNING = "UPDATE bench_cycle_episodes SET status = 'running', started_at = now(), worker = %s WHERE id = %s"
FENCE = "UPDATE bench_cycle_runs SET step = step + 1, updated_at = now() WHERE id = %s AND lease_epoch = %s"
JOURNAL = """INSERT INTO bench_cycle_journal (run_id, episode_id, lease_epoch, kind, payload)
VALUES (%s, %s, %s, 'step', '{"ok": true, "note": "episode result"}')"""
EPISODE_DONE = ("UPDATE bench_cycle_episodes SET status = 'done', finished_at = now() "
                "WHERE id = %s AND status = 'running'")
EPISODE_NEXT = "INSERT INTO bench_cycle_episodes (run_id, seq, status, due_at) VALUES (%s, 0, 'due', now())"
RELEASE = "UPDATE bench_cycle_runs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = %s AND lease_epoch = %s"


def create_schema(*, runs: int = 10_000) -> None:
    """runs × 10 episodes, 1 % due (at most one per run), as in the reference schema scaled down."""
    with connection.cursor() as cursor:
        cursor.execute(SCHEMA_SQL, {"runs": runs})


def throughput(processes: int, *, seconds: float) -> tuple[float, int, bench_cpu.Spent]:
    """Episodes per second of `processes` forked processes running the cycle for `seconds` each; the episodes,
    and the CPU they took (the processes' and their backends')."""
    conninfo = _conninfo()
    connections.close_all()  # forked children must not share the parent's socket
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    children = [context.Process(target=_cycle, args=(conninfo, seconds, results)) for _ in range(processes)]
    for child in children:
        child.start()
    done = [results.get() for _ in children]
    for child in children:
        child.join()
    episodes = sum(count for count, _, _ in done)
    spent = sum((cpu for _, _, cpu in done), bench_cpu.NOTHING)
    return episodes / max(wall for _, wall, _ in done), episodes, spent


def _cycle(conninfo: str, seconds: float, results) -> None:
    me = f"raw{os.getpid()}"
    done = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.cursor()
        meter = bench_cpu.Meter(conn.info)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            with conn.transaction():
                row = cursor.execute(CLAIM).fetchone()
                if row is None:
                    continue
                episode_id, run_id = row
                leased = cursor.execute(LEASE, (me, run_id)).fetchone()
                if leased is None:
                    continue
                epoch = leased[0]
                cursor.execute(EPISODE_RUNNING, (me, episode_id))
            with conn.transaction():
                cursor.execute(FENCE, (run_id, epoch))
                if cursor.rowcount != 1:
                    continue  # fenced: another process took the run (never, with leases of 90 s)
                cursor.execute(JOURNAL, (run_id, episode_id, epoch))
            with conn.transaction():
                cursor.execute(EPISODE_DONE, (episode_id,))
                cursor.execute(EPISODE_NEXT, (run_id,))
                cursor.execute(RELEASE, (run_id, epoch))
            done += 1
        results.put((done, time.monotonic() - started, meter.spent()))


def _conninfo() -> str:
    settings = connection.settings_dict
    parts = {"dbname": settings["NAME"], "user": settings.get("USER"), "password": settings.get("PASSWORD"),
             "host": settings.get("HOST"), "port": settings.get("PORT"),
             "options": settings.get("OPTIONS", {}).get("options")}  # the site's session settings (no JIT), both sides
    return psycopg.conninfo.make_conninfo(**{key: str(value) for key, value in parts.items() if value})
