import pytest
from django.core.exceptions import ImproperlyConfigured

from lucia_site import checks


@pytest.mark.django_db
def test_healthz_reports_database_ok(client):
    response = client.get("/healthz/")
    assert response.status_code == 200
    assert response.json()["checks"]["database"] == "ok"


def test_secret_key_required_outside_debug(settings):
    settings.DEBUG = False
    settings.SECRET_KEY = settings.INSECURE_SECRET_KEY
    ids = [problem.id for problem in checks.check_configuration(None)]
    assert "lucia.E001" in ids


def test_openai_without_key_is_an_error(settings):
    settings.LUCIA_LLM = "openai"
    settings.OPENAI_API_KEY = None
    ids = [problem.id for problem in checks.check_configuration(None)]
    assert "lucia.E003" in ids


def test_q_timeout_must_be_below_retry(monkeypatch):
    import importlib

    import lucia_site.settings as site_settings

    monkeypatch.setenv("LUCIA_Q_TIMEOUT", "400")
    monkeypatch.setenv("LUCIA_Q_RETRY", "300")
    with pytest.raises(ImproperlyConfigured, match="must be below LUCIA_Q_RETRY"):
        importlib.reload(site_settings)
    monkeypatch.undo()
    importlib.reload(site_settings)


@pytest.mark.django_db
def test_healthz_says_when_no_worker_has_executed_a_task(client):
    checks = client.get("/healthz/").json()["checks"]
    assert checks["last_task_executed_at"] is None and checks["clusters"] == []


@pytest.mark.django_db
def test_the_site_connections_never_jit_compile(monkeypatch):
    """A short statement with a swollen estimate would be compiled on every execution (lucia_site.database)."""
    from django.db import connection

    from lucia_site import database

    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/d?options=-c%20statement_timeout%3D5000")
    assert database.database_settings()["OPTIONS"]["options"] == "-c statement_timeout=5000 -c jit=off"
    monkeypatch.setenv("DATABASE_JIT_OFF", "false")  # behind a pooler that refuses startup options
    assert database.database_settings()["OPTIONS"]["options"] == "-c statement_timeout=5000"
