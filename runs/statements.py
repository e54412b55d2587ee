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

from django.db import connection, models
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


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
        return wrapper(PreparingCursor(connection.connection), connection)


def fetch_instances(model: type[models.Model], sql: str, params: dict | list) -> list:
    """Run `sql` and read its rows as `model` instances, as the ORM would (its `from_db`, each field's database
    converters). Columns that are not the model's own become attributes of the same name; model fields the
    statement does not return are deferred."""
    with cursor() as rows:
        rows.execute(sql, params)
        names = [column.name for column in rows.description]
        records = rows.fetchall()
    fields = {field.column: field for field in model._meta.concrete_fields}
    converters = {}
    for index, name in enumerate(names):
        if name in fields and (functions := fields[name].get_db_converters(connection)):
            converters[index] = functions
    loaded = [fields[name].attname for name in names if name in fields]
    instances = []
    for record in records:
        values = list(record)
        for index, functions in converters.items():
            for convert in functions:
                values[index] = convert(values[index], fields[names[index]], connection)
        instance = model.from_db(connection.alias, loaded, [value for name, value in zip(names, values, strict=True)
                                                            if name in fields])
        for name, value in zip(names, values, strict=True):
            if name not in fields:
                setattr(instance, name, value)
        instances.append(instance)
    return instances
