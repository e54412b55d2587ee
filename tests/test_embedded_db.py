"""The embedded default database works from nothing: a fresh cluster directory, up, query, down."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

BASE_DIR = Path(__file__).resolve().parent.parent


def embedded_db(command: str, *, pgdata: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LUCIA_PGDATA": str(pgdata)}
    return subprocess.run(  # noqa: S603 - a fixed command line, no user input
        [sys.executable, "-m", "lucia_site.embedded_db", command],
        env=env, cwd=BASE_DIR, capture_output=True, text=True, timeout=180,
    )


@pytest.mark.slow
def test_embedded_database_comes_up_from_an_empty_directory_and_stops(tmp_path):
    pgdata = tmp_path / "pgdata"
    try:
        up = embedded_db("up", pgdata=pgdata)
        assert up.returncode == 0, up.stderr
        url = embedded_db("url", pgdata=pgdata).stdout.strip()
        assert str(pgdata) in url
        with psycopg.connect(url, connect_timeout=10) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
            assert connection.execute("SELECT current_database()").fetchone() == ("lucia",)
    finally:
        down = embedded_db("down", pgdata=pgdata)

    assert "stopped" in down.stdout, down.stderr
    assert embedded_db("url", pgdata=pgdata).returncode == 1
