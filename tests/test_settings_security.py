"""Production settings: deploy checks clean, no start on the development key, login throttling, password rules."""

import importlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from rest_framework.test import APIClient

from agents.models import ApiKey
from tests.factories import OrganizationFactory, api_key_for

ROOT = Path(__file__).resolve().parents[1]
# Variables tests/environment.py or a developer's shell may set that a production environment would not.
DEVELOPMENT_ONLY = ("DJANGO_DEBUG", "LUCIA_SSL_REDIRECT", "LUCIA_SECURE_COOKIES", "LUCIA_HSTS_SECONDS")


def production_env(**changes: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in DEVELOPMENT_ONLY}
    db = settings.DATABASES["default"]
    env.update({
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "LUCIA_SECRETS_KEY": secrets.token_urlsafe(32),
        "ALLOWED_HOSTS": "lucia.example.com",
        "LUCIA_PUBLIC_URL": "https://lucia.example.com",
        "LUCIA_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https",
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
    })
    env.update(changes)
    return {name: value for name, value in env.items() if value is not None}


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603 (fixed argv)
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.django_db
def test_deploy_checks_are_clean_for_a_production_environment():
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], production_env())

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize("argv", [
    ["manage.py", "check"],
    ["-c", "from lucia_site.wsgi import application"],
])
def test_without_debug_the_process_refuses_to_start_on_the_development_secret_key(argv):
    env = production_env()
    del env["DJANGO_SECRET_KEY"]

    result = run(argv, env)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "Set DJANGO_SECRET_KEY" in result.stderr


def test_debug_starts_without_a_secret_key_and_relaxes_https(monkeypatch):
    import lucia_site.settings as site_settings

    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    monkeypatch.delenv("LUCIA_SSL_REDIRECT", raising=False)
    monkeypatch.setenv("DJANGO_DEBUG", "true")
    try:
        importlib.reload(site_settings)
        relaxed = (site_settings.SECURE_SSL_REDIRECT, site_settings.SESSION_COOKIE_SECURE,
                   site_settings.SECURE_HSTS_SECONDS)
        monkeypatch.setenv("DJANGO_DEBUG", "false")
        monkeypatch.setenv("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
        importlib.reload(site_settings)
        strict = (site_settings.SECURE_SSL_REDIRECT, site_settings.SESSION_COOKIE_SECURE,
                  site_settings.SECURE_HSTS_SECONDS)
    finally:
        monkeypatch.undo()
        importlib.reload(site_settings)

    assert relaxed == (False, False, 0)
    assert strict == (True, True, 31_536_000)


def test_a_malformed_proxy_ssl_header_setting_is_refused(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    import lucia_site.settings as site_settings

    monkeypatch.setenv("LUCIA_PROXY_SSL_HEADER", "X-Forwarded-Proto")
    try:
        with pytest.raises(ImproperlyConfigured, match="HTTP_X_FORWARDED_PROTO=https"):
            importlib.reload(site_settings)
    finally:
        monkeypatch.undo()
        importlib.reload(site_settings)


# --- Admin login throttling (django-axes) ------------------------------------------------------------------------

PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("ops", password=PASSWORD, is_staff=True, is_superuser=True)


def login(client, *, password: str, address: str = "203.0.113.7", username: str = "ops"):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password},
                       REMOTE_ADDR=address)


@pytest.mark.django_db
def test_repeated_failures_lock_out_that_user_from_that_address_only(client, staff, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        assert login(client, password="wrong").status_code == 200  # the form again, with an error
    assert login(client, password="wrong").status_code == 429  # the third failure locks

    locked = login(client, password=PASSWORD)
    other_user = login(client, password="wrong", username="someone-else")
    elsewhere = login(client, password=PASSWORD, address="198.51.100.9")

    assert locked.status_code == 429
    assert "_auth_user_id" not in locked.wsgi_request.session
    assert other_user.status_code == 200  # not locked: the lockout is per user and address
    assert elsewhere.status_code == 302  # the same user from another address still gets in


@pytest.mark.django_db
def test_axes_reset_unlocks_and_a_success_clears_earlier_failures(client, staff, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        login(client, password="wrong")
    assert login(client, password=PASSWORD).status_code == 429

    call_command("axes_reset", verbosity=0)
    assert login(client, password=PASSWORD).status_code == 302

    client.logout()
    for _ in range(2):
        login(client, password="wrong")
    assert login(client, password=PASSWORD).status_code == 302  # resets the count (AXES_RESET_ON_SUCCESS)
    client.logout()
    for _ in range(2):
        login(client, password="wrong")
    assert login(client, password=PASSWORD).status_code == 302


@pytest.mark.django_db
def test_api_keys_keep_working_while_the_admin_login_is_locked_out(client, staff, settings):
    settings.AXES_FAILURE_LIMIT = 1
    login(client, password="wrong", address="127.0.0.1")
    assert login(client, password=PASSWORD, address="127.0.0.1").status_code == 429
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(OrganizationFactory(), role=ApiKey.Role.BUILDER)}")

    assert api.get("/api/v1/runs/", REMOTE_ADDR="127.0.0.1").status_code == 200


# --- Password rules ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weak", ["short1", "password1234", "12345678901234", "ops-account-ops"])
def test_weak_passwords_are_refused(weak):
    user = get_user_model()(username="ops-account-ops")
    with pytest.raises(ValidationError):
        validate_password(weak, user=user)


def test_a_long_uncommon_password_is_accepted():
    validate_password(PASSWORD, user=get_user_model()(username="ops"))


@pytest.mark.django_db
def test_behind_a_proxy_the_lockout_counts_the_address_the_proxy_saw(client, staff, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.LUCIA_CLIENT_IP_HEADER = "HTTP_X_FORWARDED_FOR"
    proxy = "10.0.0.2"

    def via_proxy(password: str, forwarded_for: str):
        return client.post("/admin/login/?next=/admin/", {"username": "ops", "password": password},
                           REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=forwarded_for)

    # A client cannot dodge the count by prepending addresses: the proxy appends the real one last.
    via_proxy("wrong", "203.0.113.7")
    assert via_proxy("wrong", "1.2.3.4, 203.0.113.7").status_code == 429
    assert via_proxy(PASSWORD, "198.51.100.9").status_code == 302  # another client behind the same proxy
