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


def test_q_workers_are_replaced_after_thousands_of_tasks_or_past_a_memory_bound(monkeypatch):
    # django-q2's default (a new worker process every 500 tasks) drained a 09:00 burst about 10% slower.
    import importlib

    import lucia_site.settings as site_settings

    assert (site_settings.Q_CLUSTER["recycle"], site_settings.Q_CLUSTER["max_rss"]) == (5000, 512 * 1024)
    monkeypatch.setenv("LUCIA_Q_RECYCLE", "800")
    monkeypatch.setenv("LUCIA_Q_MAX_RSS_KB", "300000")
    importlib.reload(site_settings)
    assert (site_settings.Q_CLUSTER["recycle"], site_settings.Q_CLUSTER["max_rss"]) == (800, 300000)
    monkeypatch.undo()
    importlib.reload(site_settings)


@pytest.mark.django_db
def test_healthz_says_when_no_worker_has_executed_a_task(client):
    checks = client.get("/healthz/").json()["checks"]
    assert checks["last_task_executed_at"] is None and checks["clusters"] == []
