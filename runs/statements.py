"""Prepared statements for the episode's hot path (DESIGN §10).

Django's cursors bind parameters on the client: every statement travels as new text that PostgreSQL parses and
plans again, and the hot path's statements are large (CTE chains with a dozen sub-selects), so planning them
cost about as much as running them. `cursor()` binds parameters on the server and prepares each statement text
once per connection (psycopg 3's `prepare=True`): the next executions skip parsing and planning.

A statement is only worth preparing if its text repeats: build hot-path SQL from constants, with every value a
parameter and names that do not change from one episode to the next (runs.leases.Rider tags count within a
statement, not globally). The cursor goes through Django's wrappers, so query logging, `execute_wrapper` and
`CaptureQueriesContext` (tests/runs/test_episode_queries.py) see these statements like any other.
"""

from __future__ import annotations

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorWrapper


class PreparingCursor(ServerBindingCursor):
    """A server-binding psycopg cursor that prepares every statement it runs (psycopg keeps a per-connection
    cache of prepared statements, keyed by text, and evicts the least used past `prepared_max`)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


def cursor() -> CursorWrapper:
    """A cursor on the default connection whose statements are bound and prepared on the server. Use it as
    `with statements.cursor() as cursor:`; it joins the connection's current transaction like any cursor."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(PreparingCursor(connection.connection))  # noqa: SLF001 (Django's own wrapping)
