"""A long-lived database's history for the throughput figures of `manage.py bench`.

The raw-SQL cycle runs on a schema seeded as a database that has worked for a while (simulator.bench_cycle:
10,000 runs of ten episodes each, analyzed). The runtime's tables would otherwise start the part nearly empty:
analyzed then, an outbox of a few rows is a table of one page, and each worker connection plans its prepared
statements on their first executions (PostgreSQL keeps a generic plan until the table is analyzed again or the
connection closes) with a sequential scan of it, even for a lookup by primary key. The outbox then grows by a row
per episode while those plans stand, so the runtime's episodes slow down as the part goes on: a start episode
scanned the whole outbox five times, about 0.2 ms each at a thousand rows (auto_explain), half the executor time of
its statements. A production worker never sees that for long: its tables are large, autovacuum analyzes them as
they grow, and its connection is replaced every DATABASE_CONN_MAX_AGE seconds.

So before the part, one real run that has done its start episode is copied in SQL as finished runs (`seed`): the
run row, its contacts (addresses of their own), its tasks, its finished episodes with their journal entries and
their sent outbox rows (to the copy's own addresses). They are completed runs: nothing dispatches, claims or counts
them against a cap.
"""

from __future__ import annotations

from django.db import connection, transaction

from runs.models import Contact, Episode, EpisodeStatus, JournalEntry, OutboxMessage, OutboxStatus, RunStatus, Task
from simulator import bench_copies

# As many finished runs as the raw cycle's schema has runs.
RUNS = 10_000

_ADDRESSES = bench_copies.addresses("history", phone_prefix="+1556")
_FINISHED = {"status": f"'{RunStatus.COMPLETED}'", "outcome": "'history'", "ended_at": "updated_at",
             "wake_when": "NULL", "next_wake_at": "NULL", "lease_owner": "NULL", "lease_expires_at": "NULL",
             "advance_enqueued_at": "NULL"}
# A sent row's idem key and provider id are its own (the template's row and the copy's run make them so), and it
# went to the copy's contact on the row's channel.
_SENT = {
    "idem_key": "md5(t.idem_key || ':' || copy.id)",
    "provider_message_id": "'history-' || copy.id || '-' || t.id",
    "recipient": f"CASE t.channel WHEN 'email' THEN {_ADDRESSES['email']} WHEN 'slack' THEN {_ADDRESSES['slack_user']}"
                 f" ELSE {_ADDRESSES['phone']} END",
}


def seed(template_id: int, *, count: int = RUNS) -> int:
    """`count` finished copies of run `template_id` (a run past its start episode) with their contacts, tasks,
    finished episodes, journal entries and sent outbox rows, in one transaction. Returns the outbox rows written."""
    with transaction.atomic(), connection.cursor() as cursor:
        run_ids = bench_copies.copy_runs(cursor, template_id, count=count, overrides=_FINISHED)
        bench_copies.copy_run_rows(cursor, Contact, template_id, run_ids, overrides=_ADDRESSES)
        bench_copies.copy_run_rows(cursor, Task, template_id, run_ids)
        done = f" AND t.status = '{EpisodeStatus.DONE}'"
        bench_copies.copy_run_rows(cursor, Episode, template_id, run_ids, where=done)
        bench_copies.copy_run_rows(cursor, JournalEntry, template_id, run_ids, by_episode=True)
        return bench_copies.copy_run_rows(cursor, OutboxMessage, template_id, run_ids, overrides=_SENT,
                                          where=f" AND t.status = '{OutboxStatus.SENT}'", by_episode=True)
