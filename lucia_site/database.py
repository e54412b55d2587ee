"""Which PostgreSQL the site talks to: `DATABASE_URL`, else the embedded default."""

import dj_database_url

from lucia_site import embedded_db
from lucia_site.env import env_bool, env_int, env_str

# Executions of one statement text before psycopg prepares it; runs.statements prepares on the first.
PREPARE_THRESHOLD = 5


def database_settings() -> dict:
    url = env_str("DATABASE_URL") or embedded_url()
    config = dj_database_url.parse(url)
    socket_dir = config.get("OPTIONS", {}).pop("host", None)
    if socket_dir:
        config["HOST"] = socket_dir
    # Persistent connections: django-q2's ORM broker moves ~6x more tasks with them.
    config["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
    config["CONN_HEALTH_CHECKS"] = env_bool("DATABASE_CONN_HEALTH_CHECKS", True)
    # No JIT compilation: PostgreSQL compiles a statement whose estimated cost passes jit_above_cost on every
    # execution, and the site's statements are short lookups whose estimates swell with what the statistics say is
    # due. The dispatcher's due-runs query was compiled for 15-18 ms to run for 0.3 ms (manage.py bench, a million
    # sleeping runs after a 09:00 burst), on every tick. A pooler may refuse startup options (PgBouncer does for
    # settings it does not track): there set DATABASE_JIT_OFF=false and `ALTER ROLE ... SET jit = off`.
    options = config.setdefault("OPTIONS", {})
    if env_bool("DATABASE_JIT_OFF", True):
        options["options"] = " ".join(filter(None, [options.get("options"), "-c jit=off"]))
    # Server-side prepared statements for the episode's hot path (runs.statements; the ORM's client-side cursors
    # never prepare). Django turns them off for poolers in transaction mode: behind one (PgBouncer < 1.21, or
    # without max_prepared_statements), set DATABASE_PREPARED_STATEMENTS=false.
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        options["prepare_threshold"] = PREPARE_THRESHOLD
    return config


def embedded_url() -> str:
    try:
        return embedded_db.running_url()
    except embedded_db.EmbeddedDatabaseDown:
        # Commands that never touch the database (check, help) still work; the
        # first query fails with a connection error naming this socket.
        return f"postgresql://postgres:@/{embedded_db.DATABASE_NAME}?host={embedded_db.PGDATA}"
