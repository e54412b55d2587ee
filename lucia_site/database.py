"""Which PostgreSQL the site talks to: `DATABASE_URL`, else the embedded default."""

import dj_database_url

from lucia_site import embedded_db
from lucia_site.env import env_bool, env_int, env_str


def database_settings() -> dict:
    url = env_str("DATABASE_URL") or embedded_url()
    config = dj_database_url.parse(url)
    socket_dir = config.get("OPTIONS", {}).pop("host", None)
    if socket_dir:
        config["HOST"] = socket_dir
    # Persistent connections: django-q2's ORM broker moves ~6x more tasks with them.
    config["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
    config["CONN_HEALTH_CHECKS"] = env_bool("DATABASE_CONN_HEALTH_CHECKS", True)
    return config


def embedded_url() -> str:
    try:
        return embedded_db.running_url()
    except embedded_db.EmbeddedDatabaseDown:
        # Commands that never touch the database (check, help) still work; the
        # first query fails with a connection error naming this socket.
        return f"postgresql://postgres:@/{embedded_db.DATABASE_NAME}?host={embedded_db.PGDATA}"
