"""runs.statements: the hot path's statements are bound and prepared on the server, still seen by Django's query
log, and read back as the ORM would read them."""

from __future__ import annotations

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
