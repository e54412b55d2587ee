"""Cancel a run with a reason, through the confirmation page, in chromium."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission

from runs import clock
from runs.models import Run, RunStatus
from tests.factories import EpisodeFactory, OrganizationFactory, RunFactory

pytestmark = pytest.mark.browser


def test_cancel_a_run_with_a_reason(page, studio_user, log_in):
    acme = OrganizationFactory(name="Acme", slug="acme")
    run = RunFactory(organization=acme, status=RunStatus.WAITING, wake_when="followup:1")
    EpisodeFactory(run=run, kind="followup", due_at=clock.wall_now() + timedelta(days=2))
    user = studio_user("oscar", organizations=[acme])
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="runs",
                                                         codename__in=["view_run", "change_run"]))
    log_in(user)

    page.goto(f"/admin/runs/run/{run.pk}/change/")
    assert page.locator("#run-status-value").inner_text() == "Waiting"
    page.click("#op-cancel")
    page.wait_for_url(f"**/admin/runs/run/{run.pk}/cancel/")
    page.click("#confirm-cancel")  # no reason yet: the browser's own check keeps the form here
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING
    page.fill("#id_reason", "The vendor went out of business")
    page.click("#confirm-cancel")

    page.wait_for_url(f"**/admin/runs/run/{run.pk}/change/")
    assert page.locator("#run-status-value").inner_text() == "Cancelled"
    assert "The vendor went out of business" in page.locator("#run-outcome").inner_text()
    assert "Cancelled run" in page.locator(".messagelist").inner_text()
    cancelled = Run.objects.get(pk=run.pk)
    assert (cancelled.status, cancelled.outcome, cancelled.cancelled_by_id) == (
        RunStatus.CANCELLED, "The vendor went out of business", user.pk)
