"""Whether commits wait for the disk (connectors.commits): synchronous_commit as the session has it now, as a
statement leaves its transaction, and the statements a call ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction


class _RolledBack(Exception):
    pass


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def left_by(sql: str, params: dict) -> str:
    """synchronous_commit as `sql` leaves its transaction, run in one that is rolled back. It must write one row:
    a statement that writes nothing has nothing to commit."""
    with pytest.raises(_RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert cursor.rowcount == 1
        setting = synchronous_commit()
        raise _RolledBack
    return setting


def statements_run(call: Callable[[], Any], *, picked: Callable[[str], bool]) -> list[tuple[str, Any]]:
    """The statements `call` ran that `picked` picks by their text, with their parameters."""
    seen = []

    def record(execute, sql, params, many, context):
        if picked(sql):
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    return seen
