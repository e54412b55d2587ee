"""Seeing a backend wait on a row lock: the concurrency tests start a statement behind another transaction's lock
and must know it is really waiting there before they let that transaction commit."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from django.db import connection, transaction


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


def behind_a_writer(write: Callable[[], None], then: Callable[[], None]) -> tuple[list[Exception], bool]:
    """`write` runs in a transaction of its own thread and holds it open; `then` starts in a second thread and
    must wait on `write`'s locks; once it does, `write` commits. Returns the errors either raised and whether
    `then` was seen waiting on a lock (its statement began before `write` committed)."""
    locked, commit = threading.Event(), threading.Event()
    errors: list[Exception] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                write()
                locked.set()
                assert commit.wait(30)
        except Exception as exc:
            errors.append(exc)
        finally:
            locked.set()
            connection.close()

    def waiter() -> None:
        try:
            then()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    writing = threading.Thread(target=writer)
    writing.start()
    assert locked.wait(30)
    waiting = threading.Thread(target=waiter)
    waiting.start()
    blocked = wait_for_a_lock_wait()
    commit.set()
    writing.join(30)
    waiting.join(30)
    return errors, blocked


@contextlib.contextmanager
def row_lock_held(model, pk) -> Iterator[Callable[[], None]]:
    """Row `pk` of `model` locked (FOR UPDATE) by another thread's open transaction until the block ends, or until
    the `release()` it yields is called."""
    holding, done = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                model.objects.select_for_update().get(pk=pk)
                holding.set()
                done.wait(30)
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()

    def release() -> None:
        done.set()
        thread.join(30)

    try:
        assert holding.wait(30)
        yield release
    finally:
        release()
