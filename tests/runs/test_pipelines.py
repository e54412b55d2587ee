"""A transaction's BEGIN with its first statement, its last statement with its COMMIT (runs.pipelines): one round
trip each, and a transaction that fails still rolls back whole. Outside a test's own transaction (transaction=True):
inside one, the blocks below are savepoints and the pipelines stand aside."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.transaction import TransactionManagementError
from psycopg import pq

from runs import leases, pipelines, statements
from runs.journal import Entry
from runs.models import Episode, EpisodeKind, JournalEntry, Run
from tests.runs import loop_helpers

INSERT_EPISODE = "INSERT INTO runs_episode_probe (note) VALUES (%s)"


@pytest.fixture
def probe(transactional_db) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE runs_episode_probe (note text NOT NULL)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE runs_episode_probe")


def _notes() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT note FROM runs_episode_probe ORDER BY note")
        return [note for (note,) in cursor.fetchall()]


@contextlib.contextmanager
def _syncs(tmp_path: Path) -> Iterator[list[int]]:
    """How many Syncs the connection sends in the block (a pipeline's round trip; a plain statement, sent with
    the simple protocol or not, is one too: Syncs plus simple Queries are the round trips)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    path = tmp_path / "libpq.trace"
    counted: list[int] = []
    with path.open("w") as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield counted
        finally:
            pgconn.untrace()
    sent = [line.split("\t") for line in path.read_text().splitlines() if line.startswith("F\t")]
    counted.append(sum(1 for fields in sent if fields[2].split()[0] in ("Sync", "Query")))


@pytest.mark.django_db(transaction=True)
def test_begin_goes_with_the_first_statement_and_the_commit_with_the_last(probe, tmp_path):
    with _syncs(tmp_path) as round_trips, transaction.atomic():
        with statements.cursor() as cursor:
            with pipelines.begun_with_next_statement():
                cursor.execute(INSERT_EPISODE + " RETURNING note", ["first"])
            assert cursor.fetchone() == ("first",)
            with connection.cursor() as plain:  # a statement not prepared before: one round trip, not two
                plain.execute(INSERT_EPISODE, ["middle"])
            with pipelines.committed_with_next_statement():
                cursor.execute(INSERT_EPISODE + " RETURNING note", ["last"])
            assert cursor.fetchone() == ("last",)
    assert round_trips == [3]
    assert _notes() == ["first", "last", "middle"]
    assert connection.get_autocommit() and connection.connection.autocommit


@pytest.mark.django_db(transaction=True)
def test_a_failing_first_statement_rolls_back_and_leaves_the_connection_usable(probe):
    with pytest.raises(DatabaseError), transaction.atomic():
        with statements.cursor() as cursor, pipelines.begun_with_next_statement():
            cursor.execute("SELECT 1 / %s", [0])
    assert connection.connection.pgconn.transaction_status == pq.TransactionStatus.IDLE
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(INSERT_EPISODE, ["after"])
    assert _notes() == ["after"]


@pytest.mark.django_db(transaction=True)
def test_a_failing_last_statement_is_not_committed_nor_is_anything_before_it(probe):
    with pytest.raises(DatabaseError), transaction.atomic():
        with statements.cursor() as cursor:
            with pipelines.begun_with_next_statement():
                cursor.execute(INSERT_EPISODE, ["first"])
            with pipelines.committed_with_next_statement():
                cursor.execute(INSERT_EPISODE, [None])  # NOT NULL
    assert _notes() == []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(INSERT_EPISODE, ["after"])
    assert _notes() == ["after"]


@pytest.mark.django_db(transaction=True)
def test_the_commit_waits_for_the_outermost_block(probe):
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(INSERT_EPISODE, ["outer"])
        with transaction.atomic(), statements.cursor() as cursor, pipelines.committed_with_next_statement():
            cursor.execute(INSERT_EPISODE, ["inner"])
        1 / 0  # noqa: B018 (the outer block fails after the inner one's last statement)
    assert _notes() == []


@pytest.mark.django_db(transaction=True)
def test_a_block_marked_for_rollback_commits_nothing(probe):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(INSERT_EPISODE, ["before"])
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError), statements.cursor() as cursor, \
                pipelines.committed_with_next_statement():
            cursor.execute(INSERT_EPISODE, ["last"])  # Django refuses it before anything is queued
    assert _notes() == []


@pytest.mark.django_db(transaction=True)
def test_on_commit_hooks_run_once_after_the_pipelined_commit(probe):
    ran = []
    with transaction.atomic():
        transaction.on_commit(lambda: ran.append(_notes()))
        with statements.cursor() as cursor, pipelines.committed_with_next_statement():
            cursor.execute(INSERT_EPISODE, ["last"])
        assert ran == []
    assert ran == [["last"]]


@pytest.mark.django_db(transaction=True)
def test_a_zombie_fence_writes_nothing_and_the_next_fence_begins_cleanly():
    run = loop_helpers.make_run()
    episode = loop_helpers.add_episode(run, EpisodeKind.START)
    epoch = loop_helpers.claim(run)
    ctx = loop_helpers.context(Run.objects.get(pk=run.pk), episode, epoch=epoch)
    ctx.journal("note", {"text": "from the zombie"})
    Run.objects.filter(pk=run.pk).update(lease_epoch=epoch + 1)
    with pytest.raises(leases.LeaseLost), ctx.fence():
        pytest.fail("the fence's body ran without the lease")
    assert not JournalEntry.objects.filter(run=run).exists()
    assert [entry.kind for entry in ctx.pending] == ["note"]  # pending again, as for any rollback
    assert connection.connection.pgconn.transaction_status == pq.TransactionStatus.IDLE

    Run.objects.filter(pk=run.pk).update(lease_epoch=epoch)
    with ctx.fence() as locked:
        Episode.objects.filter(pk=episode.pk).update(error="inside")
        assert locked.pk == run.pk
    assert JournalEntry.objects.filter(run=run, kind="note").count() == 1
    assert Episode.objects.get(pk=episode.pk).error == "inside"


@pytest.mark.django_db(transaction=True)
def test_an_error_after_the_fence_rolls_back_its_writes():
    run = loop_helpers.make_run()
    episode = loop_helpers.add_episode(run, EpisodeKind.START)
    epoch = loop_helpers.claim(run)
    ctx = loop_helpers.context(Run.objects.get(pk=run.pk), episode, epoch=epoch)
    ctx.pending.append(Entry(episode_id=episode.pk, kind="note", data={"text": "rolled back"}, at=ctx.now))
    with pytest.raises(RuntimeError), ctx.fence():
        raise RuntimeError("the decision failed")
    assert not JournalEntry.objects.filter(run=run).exists()
    assert [entry.kind for entry in ctx.pending] == ["note"]


@pytest.mark.django_db(transaction=True)
def test_a_read_sent_along_the_fence_sees_its_writes_in_its_round_trip(tmp_path):
    run = loop_helpers.make_run()
    episode = loop_helpers.add_episode(run, EpisodeKind.START)
    epoch = loop_helpers.claim(run)
    ctx = loop_helpers.context(Run.objects.get(pk=run.pk), episode, epoch=epoch)
    with ctx.fence():  # the process reads the run's plan once (runs.plan_cache)
        pass
    ctx.journal("note", {"text": "written by the fence"})
    sent = []

    def along() -> None:
        cursor = statements.cursor()
        cursor.execute("SELECT count(*) FROM runs_journalentry WHERE run_id = %s", [run.pk])
        sent.append(cursor)

    with _syncs(tmp_path) as round_trips, ctx.fence(along=along):
        assert sent[0].fetchone() == (1,)
    assert round_trips == [2]  # BEGIN, the fence's statement and the read; then Django's COMMIT
