"""A Studio user logs in through the real login form in chromium."""

import pytest

pytestmark = pytest.mark.browser


def test_superuser_logs_in_and_reaches_the_studio(page, studio_user, log_in):
    log_in(studio_user("root", superuser=True))

    assert page.locator("#site-name").inner_text().strip()
    assert "/admin/login/" not in page.url


def test_wrong_password_is_refused_in_the_browser(page, studio_user):
    studio_user("root", superuser=True)
    page.goto("/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "not-the-password")
    page.click("input[type=submit]")

    assert page.locator(".errornote").is_visible()
    assert "/admin/login/" in page.url
