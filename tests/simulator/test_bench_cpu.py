"""The bench's CPU meter reads this process's CPU and, on a local server, its backend's."""

from types import SimpleNamespace

import pytest
from django.db import connection

from simulator import bench_cpu

pytestmark = pytest.mark.django_db


def test_a_backends_work_is_counted_as_the_backends_not_the_workers():
    connection.ensure_connection()
    meter = bench_cpu.Meter(connection.connection.info)
    if meter.stat is None:
        pytest.skip("PostgreSQL does not run on this machine: its backend's CPU cannot be read")

    with connection.cursor() as cursor:  # a few hundred ms of the backend's CPU, next to nothing of ours
        cursor.execute("SELECT count(*) FROM generate_series(1, 4000000) g WHERE g % 7 = 0")
        cursor.fetchone()
    spent = meter.spent()

    assert spent.backend >= 0.05
    assert spent.worker < spent.backend


def test_a_remote_servers_backend_is_not_read():
    remote = SimpleNamespace(host="db.example.com", backend_pid=1)

    spent = bench_cpu.Meter(remote).spent()

    assert spent.backend is None and spent.worker >= 0


def test_spent_adds_up_and_an_unknown_backend_stays_unknown():
    total = bench_cpu.NOTHING + bench_cpu.Spent(worker=0.5, backend=0.25) + bench_cpu.Spent(worker=0.5, backend=0.25)

    assert total == bench_cpu.Spent(worker=1.0, backend=0.5)
    assert (total + bench_cpu.Spent(worker=1.0, backend=None)).backend is None
