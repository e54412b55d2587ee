"""lucia_site.database: the settings of the site's connections."""

import pytest
from django.db import connection

from lucia_site import database


@pytest.mark.django_db
def test_the_site_connections_never_jit_compile(monkeypatch):
    """A short statement with a swollen estimate would be compiled on every execution."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/d?options=-c%20statement_timeout%3D5000")
    assert database.database_settings()["OPTIONS"]["options"] == "-c statement_timeout=5000 -c jit=off"
    monkeypatch.setenv("DATABASE_JIT_OFF", "false")  # behind a pooler that refuses startup options
    assert database.database_settings()["OPTIONS"]["options"] == "-c statement_timeout=5000"
