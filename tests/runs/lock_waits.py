"""Seeing a backend wait on a row lock: the concurrency tests start a statement behind another transaction's lock
and must know it is really waiting there before they let that transaction commit."""

from __future__ import annotations

import time

from django.db import connection


def backends_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


def wait_for_a_lock_wait(*, timeout: float = 30) -> bool:
    """Whether some backend of this test's database waits on a lock, within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while backends_waiting_on_a_lock() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # polling a condition, not waiting out a duration
    return backends_waiting_on_a_lock() > 0
