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

import functools

from django.db import connection, models
from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from psycopg.pq import Format


class PreparingCursor(ServerBindingCursor):
    """A server-binding psycopg cursor that prepares every statement it runs (psycopg keeps a per-connection
    cache of prepared statements, keyed by text, and evicts the least used past `prepared_max`)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


class PreparedDebugCursor(CursorDebugWrapper):
    """Django's query log for these statements: a statement bound on the server has no client-side text to log
    (Django reads psycopg's), so the log holds it as written, with its placeholders."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return self._execute_with_wrappers(sql, params, many=False, executor=self._execute)


def cursor() -> CursorWrapper:
    """A cursor on the default connection whose statements are bound and prepared on the server. Use it as
    `with statements.cursor() as cursor:`; it joins the connection's current transaction like any cursor."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    wrapper = PreparedDebugCursor if connection.queries_logged else CursorWrapper
    with connection.wrap_database_errors:
        raw = PreparingCursor(connection.connection)
    # As Django's own cursors do: timestamps in the connection's time zone when it differs from the adapters'.
    loader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if connection.timezone != loader.timezone:
        register_tzloader(connection.timezone, raw)
    return wrapper(raw, connection)


def fetch_dicts(sql: str, params: dict | list) -> list[dict]:
    """Run `sql`; its rows as dicts by column name."""
    with cursor() as rows:
        rows.execute(sql, params)
        names = [column.name for column in rows.description]
        return [dict(zip(names, record, strict=True)) for record in rows.fetchall()]


def fetch_instances(model: type[models.Model], sql: str, params: dict | list) -> list:
    """Run `sql` and read its rows as `model` instances (`instance`); columns that are not the model's own become
    attributes of the same name, as with the ORM's `raw()`."""
    instances = []
    for row in fetch_dicts(sql, params):
        record = instance(model, row)
        for name in row.keys() - _reading(model).keys():
            setattr(record, name, row[name])
        instances.append(record)
    return instances


def instance(model: type[models.Model], row: dict):
    """The `model` instance of a row read by name, as the ORM would read it (its `from_db`, each field's database
    converters); model fields the row lacks are deferred, other keys ignored."""
    names, values = [], []
    for column, (field, converters) in _reading(model).items():
        if column in row:
            value = row[column]
            for convert in converters:
                value = convert(value, field, connection)
            names.append(field.attname)
            values.append(value)
    return model.from_db(connection.alias, names, values)


@functools.cache
def _reading(model: type[models.Model]) -> dict[str, tuple[models.Field, list]]:
    """Each concrete field of `model` by column, with its database converters (looked up once per process)."""
    return {field.column: (field, field.get_db_converters(connection)) for field in model._meta.concrete_fields}
