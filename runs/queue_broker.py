"""django-q2's ORM broker taking tasks in one statement (Q_CLUSTER["broker_class"]).

The stock ORM broker (django_q.brokers.orm.ORM) takes tasks in two steps: a SELECT of the waiting rows, in no
order (under a 09:00 burst, a scan past every row taken and deleted before them), then an UPDATE per row, guarded
by the lock it read, so that a second cluster that read the same row takes it only once. Here one UPDATE ...
RETURNING takes the oldest waiting rows, FOR UPDATE SKIP LOCKED (a second cluster's pusher passes over the rows
being taken instead of racing for them). Everything else is the stock broker's, and so are the rows and what they
mean, which the dispatcher's marks rely on (runs.queue): a waiting row's `lock` is its enqueue time, a taken row's
the time it may be handed out again (taken + Q_CLUSTER["retry"], the stock broker's `timeout`), both on the app
server's clock as the stock broker stamps them.

Taking tasks and acknowledging them is the queue's own bookkeeping, and in its own implicit transaction it commits
without waiting for its WAL to reach the disk (synchronous_commit off for that transaction only): two fewer WAL
flushes per task, which every worker's task otherwise queued for behind the others'. After a database crash the
commits that survive are a prefix of the WAL's order, so what such a crash can take back costs a delivery, never
work: a lost take leaves the row waiting, and it is handed out again (a duplicate delivery is harmless:
runs.worker); a lost acknowledgement leaves the row taken, and it is handed out again after `retry`. Nothing a task
does outside Lucia rests on either: a send's row is committed by a commit that waits (runs.outbox.open_row), which
makes every commit before it durable, the take among them.
"""

from __future__ import annotations

import time

from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

QUEUE_TABLE = OrmQ._meta.db_table
# A one-row FROM item (so it is evaluated) that makes the statement's own transaction commit unflushed when
# %(alone)s; in a caller's transaction the caller chose how its commit waits.
UNFLUSHED = "(SELECT CASE WHEN %(alone)s THEN set_config('synchronous_commit', 'off', true) END) AS unflushed"
DEQUEUE_SQL = f"""
UPDATE {QUEUE_TABLE} SET lock = %(until)s
  FROM {UNFLUSHED}
 WHERE id IN (SELECT id FROM {QUEUE_TABLE}
               WHERE key = %(key)s AND lock < %(now)s
               ORDER BY id LIMIT %(bulk)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""  # noqa: S608 (a model's table name; every value is a parameter)
ACKNOWLEDGE_SQL = f"DELETE FROM {QUEUE_TABLE} USING {UNFLUSHED} WHERE id = %(id)s"  # noqa: S608 (as above)


class SkipLockedORM(ORM):
    def dequeue(self) -> list[tuple[int, str]] | None:
        """Up to Q_CLUSTER["bulk"] tasks, oldest first, as (id, payload); None (after a poll's pause, as the
        stock broker) when none is waiting."""
        self.get_connection()  # the stock broker's check: a stale connection is closed before it is used
        now = timezone.now()
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute(DEQUEUE_SQL, {"until": self.timeout(None), "key": self.list_key, "now": now,
                                         "bulk": Conf.BULK, "alone": _alone()})
            rows = cursor.fetchall()
        if rows:
            return sorted(rows)  # RETURNING follows the rows as updated, not the sub-select's order
        time.sleep(Conf.POLL)  # an empty queue: spare the database
        return None

    def acknowledge(self, task_id: int) -> None:
        """The task is done with (the monitor has its result): its row goes."""
        self.get_connection()
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute(ACKNOWLEDGE_SQL, {"id": task_id, "alone": _alone()})


def _alone() -> bool:
    """Whether a statement runs in its own implicit transaction, whose commit it may choose (UNFLUSHED)."""
    db = connections[Conf.ORM]
    return db.get_autocommit() and not db.in_atomic_block
