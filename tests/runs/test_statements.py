"""runs.statements: the hot path's statements are bound and prepared on the server, still seen by Django's query
log, and read back as the ORM would read them."""

from __future__ import annotations

import datetime
import decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import statements
from runs.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

SQL = "SELECT *, %(note)s AS note FROM runs_run WHERE id = %(run)s"


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [row[0] for row in cursor.fetchall()]


def test_a_statement_is_prepared_once_per_connection_and_logged_as_written():
    run = RunFactory(state={"v": 1, "policy": {"attempts": 2}})

    with CaptureQueriesContext(connection) as queries:
        for _ in range(2):
            statements.fetch_dicts(SQL, {"note": "x", "run": run.pk})

    assert [query["sql"] for query in queries.captured_queries] == [SQL, SQL]
    assert _prepared().count(SQL.replace("%(note)s", "$1").replace("%(run)s", "$2")) == 1


def test_rows_come_back_as_the_orm_reads_them():
    run = RunFactory(state={"v": 1, "policy": {"attempts": 2}})

    [read] = statements.fetch_instances(Run, SQL, {"note": "extra column", "run": run.pk})

    assert read.pk == run.pk and read.state == {"v": 1, "policy": {"attempts": 2}}
    assert read.cost_used == run.cost_used and read.note == "extra column"
    assert not read._state.adding  # saving it updates the row


def test_rows_read_by_their_own_columns():
    # A reading plan is per set of columns, not per statement text: the same model read through rows of other
    # columns (another statement, or the same `RETURNING *` after a migration) reads each row right.
    run = RunFactory(goal="the goal", state={"v": 1, "policy": {"attempts": 2}})

    [full] = statements.fetch_instances(Run, "SELECT * FROM runs_run WHERE id = %(run)s", {"run": run.pk})
    [narrow] = statements.fetch_instances(
        Run, "SELECT id, state, 7 AS extra FROM runs_run WHERE id = %(run)s", {"run": run.pk})

    assert full.goal == "the goal" and not hasattr(full, "extra")
    assert narrow.state == {"v": 1, "policy": {"attempts": 2}} and narrow.extra == 7
    assert narrow.get_deferred_fields() == {field.attname for field in Run._meta.concrete_fields} - {"id", "state"}


def test_a_plain_cursor_reads_tuples_and_fetch_dicts_reads_dicts():
    with statements.cursor() as cursor:
        cursor.execute("SELECT 1 AS one, 'two' AS two")
        assert cursor.fetchall() == [(1, "two")]

    assert statements.fetch_dicts("SELECT 1 AS one, 'two' AS two", []) == [{"one": 1, "two": "two"}]


def _timestamps(read_cursor) -> list:
    sql = "SELECT created_at, now(), %(at)s::timestamptz FROM runs_run"
    with read_cursor() as cursor:
        cursor.execute(sql, {"at": datetime.datetime(2026, 3, 29, 1, 30, tzinfo=datetime.UTC)})
        return cursor.fetchall()


@pytest.mark.parametrize("session_zone", [None, "America/New_York"])
def test_timestamps_read_as_djangos_own_cursors_read_them(session_zone):
    # Whatever the session's time zone (Django sets Django's; a SET TIME ZONE may change it), a prepared
    # statement's timestamps are the datetimes Django's cursors give: same instants, same tzinfo object.
    RunFactory()
    if session_zone:
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL TIME ZONE '{session_zone}'")

    ours, djangos = _timestamps(statements.cursor), _timestamps(connection.cursor)

    assert ours == djangos
    assert [value.tzinfo for value in ours[0]] == [value.tzinfo for value in djangos[0]]
    assert all(value.tzinfo is connection.timezone for value in ours[0])


def test_a_long_statement_converted_once_binds_each_execution_s_own_values():
    # Past psycopg's 4 KB conversion cache (the claim statement is 6.5 KB): converted once, bound every time.
    sql = "SELECT %(a)s::int + %(b)s::int AS total, %(a)s::int AS a, '100%%' AS pct -- " + "x" * 5000

    first = statements.fetch_dicts(sql, {"a": 1, "b": 2})
    second = statements.fetch_dicts(sql, {"b": 20, "a": 10})
    with statements.cursor() as cursor:
        cursor.execute("SELECT %s::int * %s::int -- " + "y" * 5000, [6, 7])
        positional = cursor.fetchone()

    assert first == [{"total": 3, "a": 1, "pct": "100%"}] and second == [{"total": 30, "a": 10, "pct": "100%"}]
    assert positional == (42,)


def test_a_cursor_given_back_is_lent_again_never_while_in_use():
    with statements.cursor() as outer:
        outer.execute("SELECT 1")
        with statements.cursor() as inner:  # asked for while `outer` is lent: a cursor of its own
            inner.execute("SELECT 2")
            kept = inner.cursor
            assert kept is not outer.cursor and inner.fetchall() == [(2,)]
        spare = outer.cursor
        assert outer.fetchall() == [(1,)]
    assert not kept.closed and spare.closed  # one idle cursor per row kind is kept, the other closed

    with statements.cursor() as again, statements.cursor(dicts=True) as dicts:
        assert again.cursor is kept and dicts.cursor is not kept
        again.execute("SELECT 3 AS three")
        dicts.execute("SELECT 3 AS three")
        assert again.fetchall() == [(3,)] and dicts.fetchall() == [{"three": 3}]
    with pytest.raises(AttributeError):  # a wrapper used after its block has let go of the lent cursor
        again.fetchall()


@pytest.mark.django_db(transaction=True)  # the connection is closed (outside any transaction) and opened again
def test_a_new_connection_lends_none_of_the_old_ones_cursors():
    with statements.cursor() as first:
        kept = first.cursor
    connection.close()  # a new connection: the old one's cursors are not lent
    with statements.cursor() as fresh:
        assert fresh.cursor is not kept and fresh.cursor.connection is connection.connection
        fresh.execute("SELECT 4")
        assert fresh.fetchall() == [(4,)]


def test_constants_written_into_a_statement_match_as_the_parameter_did():
    with statements.cursor() as cursor:
        cursor.execute(f"SELECT 'sent' IN ({statements.literals(['sending', 'sent'])}),"
                       f" 'failed' IN ({statements.literals(['sending', 'sent'])})")
        assert cursor.fetchone() == (True, False)


@pytest.mark.parametrize("value", ["it's", "50%", "Sent", ""])
def test_only_names_are_written_into_a_statement(value):
    with pytest.raises(ValueError, match="not constant names"):
        statements.literals(["sent", value])


def test_one_transformer_adapts_every_text_a_lent_cursor_runs_each_with_its_own_types():
    # The lent cursor keeps psycopg's Transformer (its dumpers and loaders by type) from one text to the next;
    # each statement still binds its own values by their own types and reads its own columns by theirs.
    at = datetime.datetime(2026, 3, 29, 1, 30, tzinfo=datetime.UTC)
    with statements.cursor(dicts=True) as cursor:
        cursor.execute("SELECT %(v)s::text AS v, %(n)s::int AS n", {"v": "text", "n": None})
        assert cursor.fetchall() == [{"v": "text", "n": None}]
        kept = cursor.cursor._tx
        cursor.execute("SELECT %(v)s::bigint AS v, %(n)s::jsonb AS n, %(at)s::timestamptz AS at",
                       {"v": 2**40, "n": '{"a": [1, 2]}', "at": at})
        [row] = cursor.fetchall()
        cursor.execute("SELECT %(v)s::numeric AS v, %(n)s::int[] AS n", {"v": "1.5", "n": [1, None, 3]})
        [last] = cursor.fetchall()
        assert cursor.cursor._tx is kept

    # jsonb as text, as Django's cursors read it
    assert row == {"v": 2**40, "n": '{"a": [1, 2]}', "at": at} and row["at"].tzinfo is connection.timezone
    assert last == {"v": decimal.Decimal("1.5"), "n": [1, None, 3]}


def test_a_copy_on_a_lent_cursor_leaves_its_column_types_to_no_later_statement():
    # A COPY's Transformer holds the types set for its columns: the next statement binds with its own.
    with statements.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE copied (a int, b int)")
        with cursor.cursor.copy("COPY copied (a, b) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "int4"])
            copy.write_row((1, 2))
        cursor.execute("SELECT %(a)s::text AS a, %(b)s::bigint AS b, (SELECT a + b FROM copied) AS c",
                       {"a": "after", "b": 2**40})
        assert cursor.fetchall() == [("after", 2**40, 3)]


def test_a_loader_registered_on_a_lent_cursor_reads_its_next_statements():
    # psycopg replaces the kept Transformer when the cursor's loaders change: the next statement reads with them.
    from psycopg.adapt import Loader

    class Shouted(Loader):
        def load(self, data):
            return bytes(data).decode().upper()

    with statements.cursor() as cursor:
        cursor.execute("SELECT 'quiet'::text")
        assert cursor.fetchall() == [("quiet",)]
        cursor.cursor.adapters.register_loader("text", Shouted)
        cursor.execute("SELECT 'loud'::text")
        assert cursor.fetchall() == [("LOUD",)]
        cursor.cursor.close()  # not lent again: its loaders are not the connection's
