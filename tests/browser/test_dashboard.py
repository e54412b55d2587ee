"""Log in and read the dashboard: the counts that need attention, each leading to its list."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission

from runs import clock
from tests.factories import EpisodeFactory, OrganizationFactory, RunFactory

pytestmark = pytest.mark.browser


def test_log_in_and_read_the_dashboard(page, studio_user, log_in):
    acme = OrganizationFactory(name="Acme", slug="acme")
    overdue = [RunFactory(organization=acme) for _ in range(2)]
    for run in overdue:
        EpisodeFactory(run=run, due_at=clock.wall_now() - timedelta(minutes=15))
    RunFactory(organization=OrganizationFactory(slug="globex"))  # not hers
    user = studio_user("olga", organizations=[acme])
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="runs",
                                                         codename__in=["view_run", "view_escalation"]))

    log_in(user)

    assert page.locator("h1").first.inner_text() == "Needs attention"
    assert page.locator('[data-count="overdue"]').inner_text() == "2"
    assert page.locator('[data-count="escalations"]').inner_text() == "0"
    assert page.locator("#panel-health").is_visible()
    page.click("#count-overdue")
    page.wait_for_url("**/admin/runs/run/?attention=overdue&work=live")
    assert sorted(int(cell.inner_text()) for cell in page.locator("#result_list tbody th").all()) == sorted(
        run.pk for run in overdue)
