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
import re
from collections.abc import Iterable
from typing import NamedTuple

from django.db import DEFAULT_DB_ALIAS, connection, models
from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.db.backends.utils import CursorWrapper
from psycopg.pq import Format
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzLoader

from connectors.prepared_cursors import PreparedDebugWrapper, PreparingCursor, connected
from runs import model_rows


class _Lending:
    """A wrapper that gives its psycopg cursor back to the connection's idle ones when closed (`cursor`), once: a
    second close must not give back a cursor lent to someone else since, and the wrapper lets go of it."""

    def close(self):
        if not self.__dict__.get("given_back"):
            self.given_back = True
            _give_back(self.db, self.cursor)
            # Used after its block, this wrapper fails loudly instead of reading another borrower's rows.
            self.cursor = None


class PreparedDebugCursor(_Lending, PreparedDebugWrapper):
    """The query-logging wrapper (DEBUG) of these statements."""


class PreparedCursor(_Lending, CursorWrapper):
    """Django's cursor wrapper for these statements, with fewer layers per call: without execute wrappers
    (`connection.execute_wrapper`), a statement runs as Django's innermost executor runs it (the broken-transaction
    check, database errors as Django's); the rows are fetched under the same error wrapping, without a wrapped
    method built per fetch. With execute wrappers, every statement goes through them as with any cursor."""

    def execute(self, sql, params=None):
        if self.db.execute_wrappers:
            return super().execute(sql, params)
        return self._execute(sql, params)

    def fetchone(self):
        with self.db.wrap_database_errors:
            return self.cursor.fetchone()

    def fetchall(self):
        with self.db.wrap_database_errors:
            return self.cursor.fetchall()


def cursor(*, dicts: bool = False) -> CursorWrapper:
    """A cursor on the default connection whose statements are bound and prepared on the server. Use it as
    `with statements.cursor() as cursor:`; it joins the connection's current transaction like any cursor.
    `dicts`: its rows are dicts by column name (psycopg's `dict_row`)."""
    db = connected()
    wrapper = PreparedDebugCursor if db.queries_logged else PreparedCursor
    with db.wrap_database_errors:
        raw = _lend(db, dicts)
    return wrapper(raw, db)


# A psycopg cursor costs more to make (its adapters map, the timestamp loader's registration) than a short
# statement costs to send, and the hot path runs about eight per episode: each connection keeps one idle cursor
# per row kind, lent to one `cursor()` at a time (a cursor asked for while it is lent, e.g. nested in another's
# block, is a new one) and reused while the connection and the time zones it was set up for stay the same.
_IDLE = "_lucia_idle_statement_cursors"


def _lend(db, dicts: bool) -> PreparingCursor:
    idle = db.__dict__.get(_IDLE)
    raw = idle.pop(dicts, None) if idle is not None and idle.connection is db.connection else None
    zones = (db.timezone, db.connection.pgconn.parameter_status(b"TimeZone"))  # the session's, as PostgreSQL says it
    if raw is not None and raw.zones == zones and not raw.closed:
        return raw
    raw = PreparingCursor(db.connection, row_factory=dict_row) if dicts else PreparingCursor(db.connection)
    raw.dicts, raw.zones = dicts, zones
    _load_timestamps(raw, db.timezone)
    return raw


def _give_back(db, raw: PreparingCursor) -> None:
    idle = db.__dict__.get(_IDLE)
    if idle is None or idle.connection is not db.connection:
        idle = db.__dict__[_IDLE] = _Idle(db.connection)
    if raw.closed or raw.connection is not idle.connection or raw.dicts in idle:
        raw.close()
    else:
        idle[raw.dicts] = raw


class _Idle(dict):
    """A connection's idle cursors by row kind (`dicts`)."""

    def __init__(self, connection):
        super().__init__()
        self.connection = connection


def _load_timestamps(raw: PreparingCursor, timezone) -> None:
    """Timestamps as Django's cursors read them: aware, in the connection's `timezone`.

    Django's loader (registered on the connection) is psycopg's pure-Python one, followed by a `replace(tzinfo=)`
    that is a no-op when PostgreSQL's session time zone is Django's: then psycopg's own loader (C, when
    psycopg's binary package is installed) returns the same datetimes, several times faster. Otherwise, as
    Django's `create_cursor` does, the cursor gets Django's loader for `timezone`.
    """
    if timezone is raw.connection.info.timezone:
        raw.adapters.register_loader(TIMESTAMPTZ_OID, TimestamptzLoader)
    elif timezone != raw.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT).timezone:
        register_tzloader(timezone, raw)


def literals(values: Iterable[str]) -> str:
    """Constants (statuses, channels) written into a statement's text as SQL string literals, `'a', 'b'`, for an
    `IN (...)`: a list parameter costs psycopg an array dumper on every execution, a literal nothing once the text is
    prepared. Only names (lower-case letters and underscores): nothing to quote, no `%` for psycopg to read."""
    names = [str(value) for value in values]
    if not all(_NAME.fullmatch(name) for name in names):
        raise ValueError(f"not constant names: {names}")
    return ", ".join(f"'{name}'" for name in names)


_NAME = re.compile(r"[a-z_]+")


def fetch_dicts(sql: str, params: dict | list) -> list[dict]:
    """Run `sql`; its rows as dicts by column name."""
    # Names come from the result (never cached by text: a migration changes what `RETURNING *` returns).
    with cursor(dicts=True) as rows:
        rows.execute(sql, params)
        return rows.fetchall()


def fetch_instances(model: type[models.Model], sql: str, params: dict | list) -> list:
    """Run `sql` and read its rows as `model` instances (`instance`); columns that are not the model's own become
    attributes of the same name, as with the ORM's `raw()`."""
    rows = fetch_dicts(sql, params)
    if not rows:
        return []
    reading = _reading(model, tuple(rows[0]))  # one result: every row has its columns
    instances = []
    for row in rows:
        record = _read(model, reading, row)
        for name in reading.extra:
            setattr(record, name, row[name])
        instances.append(record)
    return instances


def instance(model: type[models.Model], row: dict):
    """The `model` instance of a row read by name, as the ORM would read it (its `from_db`, each field's database
    converters); model fields the row lacks are deferred, other keys ignored."""
    return _read(model, _reading(model, tuple(row)), row)


def _read(model: type[models.Model], reading: _Reading, row: dict):
    values = [row[column] for column in reading.columns]
    for index, field, converters in reading.converted:
        value = values[index]
        for convert in converters:
            value = convert(value, field, connection)
        values[index] = value
    return model_rows.from_db(model, DEFAULT_DB_ALIAS, reading.attnames, values)


class _Reading(NamedTuple):
    columns: tuple[str, ...]  # the model's columns the row has, in the model's order (`from_db`'s)
    attnames: tuple[str, ...]
    converted: tuple[tuple[int, models.Field, tuple], ...]  # (index in `columns`, field, its converters)
    extra: tuple[str, ...]  # the row's other columns


@functools.lru_cache(maxsize=256)
def _reading(model: type[models.Model], row_columns: tuple[str, ...]) -> _Reading:
    """How to read a row of `row_columns` as `model` (keyed by the row's columns, not by statement text, so a
    migration that changes a statement's columns reads right)."""
    present = set(row_columns)
    fields = [field for field in model._meta.concrete_fields if field.column in present]
    converted = tuple((index, field, converters) for index, field in enumerate(fields)
                      if (converters := tuple(field.get_db_converters(connection))))
    own = {field.column for field in fields}
    return _Reading(columns=tuple(field.column for field in fields), attnames=tuple(field.attname for field in fields),
                    converted=converted, extra=tuple(column for column in row_columns if column not in own))
