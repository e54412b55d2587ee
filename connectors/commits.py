"""How a statement's commit waits for the disk.

A statement that runs in a transaction of its own may commit without waiting for its WAL to reach the disk
(synchronous_commit off for that transaction only); inside a caller's transaction the caller chose how its commit
waits. Each caller says why what a database crash could then take back loses nothing (after a crash the commits
that survive are a prefix of the WAL's order, and a commit that waits makes every one before it durable). Kept on
the connectors' floor, the lowest that commits this way (connectors.sandbox; the runtime is above it).
"""

from __future__ import annotations

# A one-row FROM item that turns synchronous_commit off for the statement's own transaction when the parameter
# `unflushed` is true. The call is volatile, so it is never folded away: it is evaluated for every row the
# statement writes (more than once is harmless), and a statement that writes nothing has nothing to commit.
UNFLUSHED_FROM = "(SELECT CASE WHEN %(unflushed)s THEN set_config('synchronous_commit', 'off', true) END) AS unflushed"


def in_own_transaction(db) -> bool:
    """Whether a statement on the connection `db` runs in its own implicit transaction (autocommit, outside any
    atomic block): only then may it choose how its commit waits."""
    return db.get_autocommit() and not db.in_atomic_block
