"""Browser tests: Playwright for Python driving Debian's chromium against a live Studio.

No browser is downloaded: Playwright launches the system's `chromium`
(`LUCIA_CHROMIUM`, default /usr/bin/chromium; `.ci/run` installs the package when
it is missing). A failing test leaves a full-page screenshot in
`tests/browser/screenshots/<test name>.png`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from agents import roles

CHROMIUM = os.environ.get("LUCIA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).parent / "screenshots"
PASSWORD = "browser-tests-password-0123"


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def browser() -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: install Debian's `chromium` package (apt-get install chromium) "
                    "or point LUCIA_CHROMIUM at a Chromium binary")
    # Playwright's sync API runs an event loop in this thread; the Django ORM calls the tests make
    # between page steps are still synchronous, so tell Django they are safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server, request) -> Iterator:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    """Each browser test makes its users and logs them in: the production hasher's deliberate slowness (two
    hashes per login) would be most of a test's time. The live server runs in this process, so it applies there."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def studio_user(transactional_db):
    """Make a Studio user: `studio_user("sam", role="Support", organizations=[org])` (role = a group name)."""

    def make(username: str, *, role: str | None = None, organizations=(), superuser: bool = False):
        user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True,
                                                    is_superuser=superuser)
        if role:
            roles.ensure_roles()  # the transactional tests' flush removes the groups the migration made
            user.groups.add(Group.objects.get(name=role))
        for organization in organizations:
            organization.staff.add(user)
        return user

    return make


@pytest.fixture
def log_in(page):
    """Log `user` into the Studio in the test's page and land on the Studio's index."""

    def go(user) -> None:
        page.goto("/admin/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/")

    return go
