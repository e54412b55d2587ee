"""The agent builder in chromium: edit → validate → simulate → publish an agent.

Simulate runs in the background: the page queues a django-q2 task and polls
its progress. No cluster runs during tests, so the test plays the worker: it
takes the queued task from django-q2's ORM queue and runs it in-process
(`run_queued_tasks`, the task's own func and args) while the page is polling.
That keeps the request path real (the click only enqueues; the page learns of
the result by polling) and the timing deterministic, which `Q_CLUSTER["sync"]`
would not: sync mode runs the task inside the request, the very thing the
button must not do.
"""

import pytest
from django.contrib.auth.models import Permission
from django_q.models import OrmQ
from playwright.sync_api import expect

from agents import versions
from agents.models import AgentVersion, VersionStatus
from tests.agents.builder_helpers import BUILDER_PERMISSIONS, run_queued_tasks, source_with_case
from tests.factories import AgentFactory, OrganizationFactory

pytestmark = pytest.mark.browser


def builder(studio_user, organization):
    # Explicit permissions: the Builder group (agents.roles) may not exist on this branch yet.
    user = studio_user("bea", organizations=[organization])
    for dotted in BUILDER_PERMISSIONS:
        app_label, codename = dotted.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


def test_edit_validate_simulate_publish_an_agent(page, studio_user, log_in):
    organization = OrganizationFactory(slug="acme")
    good = source_with_case("w9")
    bad = good.replace("delay: 2bd\n      channel: email", "delay: 2bd\n      channel: fax")
    draft = versions.create_draft(AgentFactory(organization=organization, slug="w9"), source=bad)
    fax_line = bad.splitlines().index("      channel: fax") + 1
    log_in(builder(studio_user, organization))

    # Edit: the error names its line; the gutter marks it; clicking it selects that line in the source.
    page.goto(f"/admin/agents/agentversion/{draft.pk}/change/")
    expect(page.locator(f'.lucia-gutter span[data-line="{fax_line}"]')).to_have_class("lucia-error-line")
    page.click(f'a[data-goto-line="{fax_line}"]')
    selected = page.evaluate("() => { const t = document.getElementById('id_source');"
                             " return t.value.slice(t.selectionStart, t.selectionEnd); }")
    assert selected == "      channel: fax"
    expect(page.locator("#lucia-simulate")).to_have_count(0)

    # Validate the fixed source.
    page.fill("#id_source", good)
    expect(page.locator(f'.lucia-gutter span[data-line="{len(good.splitlines())}"]')).to_be_visible()
    page.click("#lucia-validate")
    expect(page.locator(".messagelist")).to_contain_text("its config is valid")
    expect(page.locator("#lucia-config-ok")).to_be_visible()

    # Simulate: the click only queues; the page polls until the worker (this test) has run the task.
    page.click("#lucia-simulate")
    expect(page.locator("#lucia-progress-text")).to_contain_text("waiting for a worker — 0 of 1 case done")
    assert OrmQ.objects.count() == 1
    assert run_queued_tasks() == [True]
    expect(page.locator("#lucia-scorecard-verdict")).to_have_text("passed")
    expect(page.locator('tr[data-case="sends-the-pdf-next-day"]')).to_contain_text("pass")
    page.click('details[data-timeline="sends-the-pdf-next-day"] summary')
    expect(page.locator('details[data-timeline="sends-the-pdf-next-day"] table')).to_contain_text("Here it is.")

    # Publish through the gate, after a confirmation page.
    page.click("#lucia-publish")
    page.click("#lucia-confirm-publish")
    expect(page.locator(".messagelist")).to_contain_text("Published w9 v1")
    assert AgentVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED
    expect(page.locator("#lucia-deploy")).to_be_visible()
