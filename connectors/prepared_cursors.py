"""Cursors that bind parameters on the server and prepare each statement text once per connection.

Django's psycopg cursors bind on the client: every statement travels as new text that PostgreSQL parses and
plans again. The runtime's hot-path statements (runs.statements) and the sandbox connector's insert
(connectors.sandbox) repeat one text each, so preparing it once saves the parse and the plan on every later
execution. Kept on the connectors' floor, the lowest that prepares statements (the runtime is above it).
"""

from __future__ import annotations

import functools

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper
from psycopg._queries import PostgresQuery, _query2pg_nocache


class ConvertedOnce(PostgresQuery):
    """A statement's placeholders turned into PostgreSQL's ($1, $2...) once per text and process.

    psycopg caches that conversion only for texts under 4 KB with at most 50 parameters (its guard against ORMs'
    ever-new multi-row INSERTs), so it parses the larger hot-path statements (the claim is 6.5 KB) on every
    execution. Hot-path texts are few and reused, so a bounded cache keyed by the text itself holds them (a
    text rebuilt per call, like a fence's with its riders, costs one hash of it per execution: far less than
    the parse). psycopg's private query class: psycopg is pinned (requirements.lock) and
    every statement test runs through it.
    """

    def convert(self, query, vars):
        if type(query) is not str or vars is None:
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _converted(query, self._tx.encoding)
        self.dump(vars)


@functools.lru_cache(maxsize=256)
def _converted(query: str, encoding: str) -> tuple:
    return _query2pg_nocache(query.encode(encoding), encoding)


class PreparingCursor(ServerBindingCursor):
    """A server-binding psycopg cursor that prepares every statement it runs (psycopg keeps a per-connection
    cache of prepared statements, keyed by text, and evicts the least used past `prepared_max`)."""

    _query_cls = ConvertedOnce

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)

    def _start_query(self, query=None):
        # psycopg gives every statement a new Transformer unless the text is the very object run last, so each
        # statement looked up and built its dumpers (by parameter type) and loaders (by column type) anew: 10-15 µs
        # per statement of the hot path, whose cursors are lent from one statement to the next
        # (runs.statements). Those caches depend on the cursor's adapters only, never on the text: the Transformer
        # a statement used serves the next one. One psycopg made for anything else is not kept: a COPY's (`query`
        # None; its column types stay in it), or the one made when the cursor's loaders changed
        # (BaseCursor._loaders_changed; the next statement makes a fresh one from the same adapters). A dumper
        # registered on these cursors after their first statement would go unseen: none is.
        kept = self.__dict__.get("statements_tx")
        if query is not None and kept is not None and kept is self._tx:
            self._last_query = query
        yield from super()._start_query(query)
        self.statements_tx = self._tx if query is not None else None


class PreparedDebugWrapper(CursorDebugWrapper):
    """Django's query log for these statements: a statement bound on the server has no client-side text to log
    (Django reads psycopg's), so the log holds it as written, with its placeholders."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return self._execute_with_wrappers(sql, params, many=False, executor=self._execute)


def connected(alias: str = DEFAULT_DB_ALIAS):
    """The connection's wrapper, checked and connected as Django's `connection.cursor()` does before it makes a
    cursor; looked up once (each `connection.x` is a lookup through asgiref's Local)."""
    db = connections[alias]
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    return db
