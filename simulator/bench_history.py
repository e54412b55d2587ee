"""A long-lived database's history for the throughput figures of `manage.py bench`.

The raw-SQL cycle runs on a schema seeded as a database that has worked for a while (simulator.bench_cycle:
10,000 runs of ten episodes each, analyzed). The runtime's tables would otherwise start the part nearly empty:
analyzed then, an outbox of a few rows is a table of one page, and each worker connection plans its prepared
statements once (PostgreSQL keeps a statement's generic plan for the connection's life) with a sequential scan
of it even for a lookup by primary key. The outbox then grows by a row per episode while those plans stand, so
the runtime's episodes slow down as the part goes on: a start episode scanned the whole outbox five times, about
0.2 ms each at a thousand rows (auto_explain), half the executor time of its statements. A production worker never
sees that for long: its tables are large, and its connection is replaced every DATABASE_CONN_MAX_AGE seconds
(planned anew).

So before the part, one real run that has done its start episode is copied in SQL as finished runs (`seed`): the
run row, its contacts (addresses of their own), its tasks, its finished episodes with their journal entries and
their sent outbox rows. They are completed runs: nothing dispatches, claims or counts them against a cap.
"""

from __future__ import annotations

from django.db import connection, transaction

from runs.models import Contact, Episode, EpisodeStatus, JournalEntry, OutboxMessage, Run, RunStatus, Task
from simulator import bench_sql

# As many finished runs as the raw cycle's schema has runs.
RUNS = 10_000

_ADDRESS_OF_COPY = {
    "email": "'history' || copy.id || '@bench.example'",
    "phone": "'+1556' || lpad((copy.id %% 10000000)::text, 7, '0')",
    "slack_user": "'UHISTORY' || copy.id",
}


def seed(template_id: int, *, count: int = RUNS) -> int:
    """`count` finished copies of run `template_id` (a run past its start episode) with their contacts, tasks,
    finished episodes, journal entries and sent outbox rows, in one transaction. Returns the outbox rows written."""
    with transaction.atomic(), connection.cursor() as cursor:
        run_ids = _copy_runs(cursor, template_id, count=count)
        for model, overrides in [(Contact, _ADDRESS_OF_COPY), (Task, {})]:
            bench_sql.copy_run_rows(cursor, model, template_id, run_ids, overrides=overrides)
        bench_sql.copy_run_rows(cursor, Episode, template_id, run_ids, overrides={},
                                where=f" AND t.status = '{EpisodeStatus.DONE}'")
        _copy_by_episode(cursor, JournalEntry, template_id, run_ids, overrides={})
        # The idem key is unique (the copy's run id makes it so); each copy writes to its own contact.
        return _copy_by_episode(cursor, OutboxMessage, template_id, run_ids, overrides={
            "idem_key": "md5(t.idem_key || ':' || copy.id)",
            "recipient": "'history' || copy.id || '@bench.example'",
            "provider_message_id": "'history-' || copy.id",
        })


def _copy_runs(cursor, template_id: int, *, count: int) -> list[int]:
    finished = {"status": f"'{RunStatus.COMPLETED}'", "outcome": "'history'", "wake_when": "NULL",
                "next_wake_at": "NULL", "lease_owner": "NULL", "lease_expires_at": "NULL",
                "advance_enqueued_at": "NULL"}
    names = bench_sql.columns(Run, skip={"id"})
    values = [finished.get(name, name) for name in names]
    cursor.execute(
        f"INSERT INTO {Run._meta.db_table} ({', '.join(names)}) "  # noqa: S608 - the model's own columns
        f"SELECT {', '.join(values)} FROM {Run._meta.db_table}, generate_series(1, %s) WHERE id = %s RETURNING id",
        [count, template_id])
    return [row[0] for row in cursor.fetchall()]


def _copy_by_episode(cursor, model, template_id: int, run_ids: list[int], *, overrides: dict) -> int:
    """Rows of the template's finished episodes, each pointed at its copy's episode of the same seq."""
    names = bench_sql.columns(model, skip={"id", "run_id", "episode_id"})
    values = [overrides.get(name, f"t.{name}") for name in names]
    episodes = Episode._meta.db_table
    cursor.execute(
        f"INSERT INTO {model._meta.db_table} (run_id, episode_id, {', '.join(names)}) "  # noqa: S608 - model columns
        f"SELECT copy.id, mine.id, {', '.join(values)} FROM {model._meta.db_table} t "
        f"JOIN {episodes} theirs ON theirs.id = t.episode_id "
        "CROSS JOIN unnest(%s::bigint[]) AS copy(id) "
        f"JOIN {episodes} mine ON mine.run_id = copy.id AND mine.seq = theirs.seq "
        "WHERE t.run_id = %s", [run_ids, template_id])
    return cursor.rowcount
