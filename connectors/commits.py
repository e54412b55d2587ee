"""How a statement's commit waits for the disk.

A commit may skip waiting for its WAL to reach the disk (synchronous_commit off for that transaction only) when the
code that commits owns the transaction outright: a statement alone in its implicit transaction
(`in_own_transaction`), or the closing write of a fence's own transaction (runs.execution). Inside a caller's
transaction the caller chose how its commit waits. Each user says why what a database crash could then take back
loses nothing: after a crash the commits that survive are a prefix of the WAL's order, and a commit that waits
makes every one before it durable. Kept on the connectors' floor, the lowest that commits this way
(connectors.sandbox; the runtime is above it).
"""

from __future__ import annotations

# Turns synchronous_commit off for the rest of the transaction.
TURN_OFF = "set_config('synchronous_commit', 'off', true)"
# The same when the parameter `unflushed` is true.
UNFLUSHED_CALL = f"CASE WHEN %(unflushed)s THEN {TURN_OFF} END"
# The same as a one-row FROM item of an UPDATE, DELETE or INSERT ... SELECT. The call is volatile, so the planner
# neither pulls the sub-select up nor drops its column: every row written is joined to that one row, so the call has
# run before the first write (once, or once per row, as planned; either is harmless), and a statement that writes
# nothing has nothing to commit.
UNFLUSHED_FROM = f"(SELECT {UNFLUSHED_CALL}) AS unflushed"


def in_own_transaction(db) -> bool:
    """Whether a statement on the connection `db` runs alone in its implicit transaction (autocommit, outside any
    atomic block)."""
    return db.get_autocommit() and not db.in_atomic_block
