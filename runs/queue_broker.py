"""django-q2's ORM broker taking tasks in one statement (Q_CLUSTER["broker_class"]).

The stock ORM broker (django_q.brokers.orm.ORM) takes tasks in two steps: a SELECT of the waiting rows, in no
order (under a 09:00 burst, a scan past every row taken and deleted before them), then an UPDATE per row, guarded
by the lock it read, so that a second cluster that read the same row takes it only once. Here one UPDATE ...
RETURNING takes the oldest waiting rows, FOR UPDATE SKIP LOCKED (a second cluster's pusher passes over the rows
being taken instead of racing for them). Everything else is the stock broker's, and so are the rows and what they
mean, which the dispatcher's marks rely on (runs.queue): a waiting row's `lock` is its enqueue time, a taken row's
the time it may be handed out again (taken + Q_CLUSTER["retry"], the stock broker's `timeout`), both on the app
server's clock as the stock broker stamps them.

Taking tasks and acknowledging them is the queue's own bookkeeping, and in its own transaction it commits without
waiting for its WAL to reach the disk (connectors.commits): a cluster takes its tasks through its one pusher and
acknowledges them through its one monitor, each a flush at a time, and workers' tasks waited on those flushes.
What a database crash takes back of it costs a delivery, never work, as for a task in flight at a crash: a take
lost with the work after it leaves the row waiting, to be handed out again (a duplicate delivery is harmless:
runs.worker) or, when the delivery that failed with the crash is acknowledged first, the run is queued again by
the dispatcher (its mark: runs.queue); a lost acknowledgement leaves the row taken until `retry`. Nothing a task
does outside Lucia rests on either: a send's row is committed by a commit that waits (runs.outbox.open_row), which
makes every commit before it durable.
"""

from __future__ import annotations

import time

from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from connectors import commits

QUEUE_TABLE = OrmQ._meta.db_table
# The rows are picked in a materialized CTE, run exactly once. As a sub-select beside the FROM item's join the
# planner could run it again for another joined row, and a second run passes over the rows the first just took
# (SKIP LOCKED finds them changed by this very statement) and takes more than `bulk`: seen once in `make test`.
DEQUEUE_SQL = f"""
WITH picked AS MATERIALIZED (
    SELECT id FROM {QUEUE_TABLE}
     WHERE key = %(key)s AND lock < %(now)s
     ORDER BY id LIMIT %(bulk)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {QUEUE_TABLE} q SET lock = %(until)s
  FROM picked, {commits.UNFLUSHED_FROM}
 WHERE q.id = picked.id
RETURNING q.id, q.payload
"""  # noqa: S608 (a model's table name; every value is a parameter)
ACKNOWLEDGE_SQL = f"DELETE FROM {QUEUE_TABLE} USING {commits.UNFLUSHED_FROM} WHERE id = %(id)s"  # noqa: S608 (as above)


class SkipLockedORM(ORM):
    def dequeue(self) -> list[tuple[int, str]] | None:
        """Up to Q_CLUSTER["bulk"] tasks, oldest first, as (id, payload); None (after a poll's pause, as the
        stock broker) when none is waiting."""
        self.get_connection()  # the stock broker's check: a stale connection is closed before it is used
        now = timezone.now()
        db = connections[Conf.ORM]
        with db.cursor() as cursor:
            cursor.execute(DEQUEUE_SQL, {"until": self.timeout(None), "key": self.list_key, "now": now,
                                         "bulk": Conf.BULK, "unflushed": commits.in_own_transaction(db)})
            rows = cursor.fetchall()
        if rows:
            return sorted(rows)  # RETURNING follows the rows as updated, not the sub-select's order
        time.sleep(Conf.POLL)  # an empty queue: spare the database
        return None

    def acknowledge(self, task_id: int) -> None:
        """Delete the row of a task whose result the monitor has: the stock broker's delete, as one statement
        whose commit need not wait (the module's docstring)."""
        self.get_connection()
        db = connections[Conf.ORM]
        with db.cursor() as cursor:
            cursor.execute(ACKNOWLEDGE_SQL, {"id": task_id, "unflushed": commits.in_own_transaction(db)})
