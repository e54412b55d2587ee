"""django-q2's ORM broker taking tasks in one statement (Q_CLUSTER["broker_class"]).

The stock ORM broker (django_q.brokers.orm.ORM) takes tasks in two steps: a SELECT of the waiting rows, in no
order (under a 09:00 burst, a scan past every row taken and deleted before them), then an UPDATE per row, guarded
by the lock it read, so that a second cluster that read the same row takes it only once. Here one UPDATE ...
RETURNING takes the oldest waiting rows, FOR UPDATE SKIP LOCKED (a second cluster's pusher passes over the rows
being taken instead of racing for them). Everything else is the stock broker's, and so are the rows and what they
mean, which the dispatcher's marks rely on (runs.queue): a waiting row's `lock` is its enqueue time, a taken row's
the time it may be handed out again (taken + Q_CLUSTER["retry"], the stock broker's `timeout`), both on the app
server's clock as the stock broker stamps them.
"""

from __future__ import annotations

import time

from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

QUEUE_TABLE = OrmQ._meta.db_table
DEQUEUE_SQL = f"""
UPDATE {QUEUE_TABLE} SET lock = %(until)s
 WHERE id IN (SELECT id FROM {QUEUE_TABLE}
               WHERE key = %(key)s AND lock < %(now)s
               ORDER BY id LIMIT %(bulk)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""  # noqa: S608 (a model's table name; every value is a parameter)


class SkipLockedORM(ORM):
    def dequeue(self) -> list[tuple[int, str]] | None:
        """Up to Q_CLUSTER["bulk"] tasks, oldest first, as (id, payload); None (after a poll's pause, as the
        stock broker) when none is waiting."""
        self.get_connection()  # the stock broker's check: a stale connection is closed before it is used
        now = timezone.now()
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute(DEQUEUE_SQL, {"until": self.timeout(None), "key": self.list_key, "now": now,
                                         "bulk": Conf.BULK})
            rows = cursor.fetchall()
        if rows:
            return sorted(rows)  # RETURNING follows the rows as updated, not the sub-select's order
        time.sleep(Conf.POLL)  # an empty queue: spare the database
        return None
