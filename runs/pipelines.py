"""Statements that share one round trip (psycopg 3's pipeline mode), inside Django's transactions (DESIGN §10).

Outside pipeline mode psycopg sends a statement and waits for its result before the next one; in pipeline mode it
queues them, and a Sync sends what is queued and brings every result back: one round trip. A statement's results
are read after that Sync, so only statements whose results nothing in between needs can share it:

- `synced_after_next_statement`: what the caller queued goes with the block's next statement (the address's lock
  before the send's row, runs.compliance.contact_lock);
- `begun_with_next_statement`: a transaction's BEGIN, which psycopg sends and syncs on its own (even in pipeline
  mode), goes with its first statement, and what the caller queues after it (the episode's closing fence and the
  decision's read, runs.context, runs.decisions.StandingRead);
- `committed_with_next_statement`: a transaction's last statement and its COMMIT (the episode's closing write,
  runs.execution._close).

An error in a pipeline makes the server skip what follows up to the Sync, and psycopg raises it when it leaves the
pipeline: a failing first statement never runs under a BEGIN it was not sent with, and a COMMIT after a failing
statement is not run (the transaction is left failed, and Django's atomic block rolls it back as for any error).

BEGIN and COMMIT are queued on psycopg's connection, not through a Django cursor: like the ones Django's atomic
blocks send, they are not statements of the query log (tests/runs/test_episode_queries.py counts statements).
They use psycopg's private `_exec_command` and `_get_tx_start_command` (psycopg is pinned, requirements.lock; the
tests in tests/runs/test_pipelines.py run through them) and, for BEGIN, its `_autocommit` flag (below).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from django.db import connection
from psycopg.pq import TransactionStatus


@contextlib.contextmanager
def synced_after_next_statement(pipelined: contextlib.ExitStack, *,
                                before_sync: Callable[[], None] | None = None) -> Iterator[None]:
    """Leave the pipeline `pipelined` holds (a Sync: the results of everything queued) right after the block's
    next statement through a Django cursor is queued, and `before_sync` queued what follows it (statements whose
    results are read after the Sync). Any later statement of the block runs on its own."""

    def execute(run: Callable, sql: str, params, many: bool, context: dict):
        result = run(sql, params, many, context)
        if not waiting:  # a later statement, or one `before_sync` queues
            return result
        waiting.clear()
        with connection.wrap_database_errors:
            if before_sync is not None:
                before_sync()
            pipelined.close()
        return result

    waiting = [True]
    with connection.execute_wrapper(execute):
        yield


@contextlib.contextmanager
def begun_with_next_statement(*, before_sync: Callable[[], None] | None = None) -> Iterator[None]:
    """The transaction's BEGIN travels with the block's next statement, and `before_sync` queues what follows it in
    the same round trip. Only in an outermost atomic block that has sent nothing yet (a fence's: runs.context);
    elsewhere the statements run one by one, in the same order. The results are read after the Sync, which leaves
    the transaction open (a Sync ends only an implicit transaction)."""
    raw = connection.connection
    if raw is None or not _outermost() or raw._pipeline is not None or raw.autocommit \
            or raw.pgconn.transaction_status != TransactionStatus.IDLE:
        if before_sync is None:
            yield
            return
        with contextlib.ExitStack() as unpipelined, synced_after_next_statement(unpipelined, before_sync=before_sync):
            yield
        return
    with contextlib.ExitStack() as pipelined:
        # Callbacks run last first: psycopg's own start of the transaction stays off until the Sync has run (then
        # the connection is in the transaction, and psycopg sees it).
        pipelined.callback(_set_autocommit_flag, raw, False)
        pipelined.enter_context(raw.pipeline())
        with raw.lock:
            raw.wait(raw._exec_command(raw._get_tx_start_command()))
        # psycopg queues a BEGIN before a statement while the connection is idle and not in autocommit, and syncs
        # right after it (it must see the transaction start before the next statement): one round trip of its own.
        # This one is queued already.
        _set_autocommit_flag(raw, True)
        with synced_after_next_statement(pipelined, before_sync=before_sync):
            yield


@contextlib.contextmanager
def committed_with_next_statement() -> Iterator[None]:
    """The block's next statement is its transaction's last: the COMMIT travels with it, and the atomic block's
    own commit finds nothing left to do. Only in an outermost atomic block that will commit (not marked for
    rollback) and has begun; elsewhere the statement runs as usual and the block commits at its end.

    Nothing may run in the transaction after that statement: a later one would start a transaction of its own.
    """
    raw = connection.connection
    if raw is None or not _outermost() or connection.needs_rollback or raw._pipeline is not None \
            or raw.pgconn.transaction_status != TransactionStatus.INTRANS:
        yield
        return
    with contextlib.ExitStack() as pipelined:
        pipelined.enter_context(raw.pipeline())

        def commit() -> None:
            with raw.lock:
                raw.wait(raw._exec_command(b"COMMIT"))

        with synced_after_next_statement(pipelined, before_sync=commit):
            yield


def _outermost() -> bool:
    """In one atomic block (no savepoint, not nested) that commits on its exit."""
    return (connection.in_atomic_block and connection.commit_on_exit and len(connection.atomic_blocks) == 1
            and not connection.savepoint_ids)


def _set_autocommit_flag(raw, value: bool) -> None:
    """psycopg's own flag, not its `autocommit` setter (which refuses while a transaction is open, and syncs in
    pipeline mode): Django's atomic block keeps the connection out of autocommit throughout."""
    raw._autocommit = value
