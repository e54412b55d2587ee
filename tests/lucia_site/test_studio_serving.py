"""The Studio in production: styled with DEBUG off (WhiteNoise), branded, and its own 404 and 500 pages."""

import io

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings
from whitenoise.middleware import WhiteNoiseMiddleware

from lucia_site import checks
from lucia_site.wsgi import application
from tests.studio_world import studio_user


def wsgi_get(path: str) -> tuple[str, dict, bytes]:
    """GET `path` from the WSGI application itself, as a WSGI server would."""
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "80", "HTTP_HOST": "localhost", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(),
               "wsgi.errors": io.StringIO(), "wsgi.version": (1, 0), "wsgi.multithread": False,
               "wsgi.multiprocess": False, "wsgi.run_once": False}
    started = {}

    def start_response(status, headers, exc_info=None):
        started.update(status=status, headers=dict(headers))

    body = b"".join(application(environ, start_response))
    return started["status"], started["headers"], body


@pytest.mark.django_db  # the WSGI handler's request_started closes old connections
def test_the_admin_css_is_served_by_the_wsgi_app_with_debug_off():
    assert settings.DEBUG is False
    status, headers, body = wsgi_get("/static/admin/css/base.css")

    assert status.startswith("200")
    assert headers["Content-Type"].startswith("text/css")
    assert b"--body-bg" in body or b"body" in body
    assert wsgi_get("/static/lucia/studio.css")[0].startswith("200")


def test_collectstatic_fills_static_root_and_whitenoise_serves_it_without_the_finders(tmp_path, rf):
    with override_settings(STATIC_ROOT=tmp_path, WHITENOISE_USE_FINDERS=False):
        assert [problem.id for problem in checks.check_static_files(None)] == ["lucia.W011"]
        call_command("collectstatic", "--no-input", verbosity=0)
        assert (tmp_path / "admin" / "css" / "base.css.gz").is_file()
        assert checks.check_static_files(None) == []

        middleware = WhiteNoiseMiddleware(lambda request: pytest.fail("not served from STATIC_ROOT"))
        response = middleware(rf.get("/static/lucia/studio.css"))
    assert response.status_code == 200


@pytest.mark.django_db
def test_the_studio_is_branded_and_view_site_opens_the_api_docs(client):
    client.force_login(studio_user("root", superuser=True))
    page = client.get("/admin/").content.decode()

    assert "Lucia Studio" in page and "Django administration" not in page
    assert 'href="/api/docs/"' in page and "View site" not in page
    assert "lucia/studio.css" in page
    assert client.get("/api/docs/").status_code == 200


@pytest.mark.django_db
def test_a_missing_studio_page_is_a_studio_404(client):
    client.force_login(studio_user("root", superuser=True))

    for path in ("/admin/runs/run/999999/timeline/", "/admin/no-such-page/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "Lucia Studio" in response.content.decode() and 'id="studio-not-found"' in response.content.decode()
    assert Client().get("/admin/no-such-page/").status_code == 302  # anonymous: to the login page first
    assert client.get("/api/v1/no-such-thing/").json() == {"detail": "Not found."}


@pytest.mark.django_db
def test_a_server_error_in_the_studio_is_a_styled_page_without_a_database(client, monkeypatch):
    from django.contrib import admin

    from runs.models import Run

    def fail(*args, **kwargs):
        raise RuntimeError("the database went away")

    client.force_login(studio_user("root", superuser=True))
    monkeypatch.setattr(type(admin.site._registry[Run]), "get_changelist_instance", fail)
    client.raise_request_exception = False
    response = client.get("/admin/runs/run/")

    assert response.status_code == 500
    assert "Lucia Studio" in response.content.decode() and "admin/css/base.css" in response.content.decode()
