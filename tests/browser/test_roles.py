"""Roles hold in the browser: a Viewer is refused every write, a Support user sees only their organization."""

import pytest

from agents import roles
from connectors.models import Suppression
from runs.models import EscalationStatus, RunStatus
from tests.studio_world import build_world

pytestmark = pytest.mark.browser

# Every control that would write; the changelist's search box only reads.
WRITE_CONTROLS = ("#content form:not(#changelist-search) button, "
                  "#content form:not(#changelist-search) input[type=submit], #content select[name=action]")


def post_as_page(page, path: str, form: dict) -> int:
    """POST a form with the page's session and CSRF token, as a hand-made request would; returns the status."""
    token = next(cookie["value"] for cookie in page.context.cookies() if cookie["name"] == "csrftoken")
    response = page.request.post(path, form={**form, "csrfmiddlewaretoken": token},
                                 headers={"Referer": page.url, "X-CSRFToken": token}, max_redirects=0)
    return response.status


def test_a_viewer_is_refused_every_write(page, studio_user, log_in):
    world = build_world()
    run, escalation = world.rows["runs.run"][0], world.rows["runs.escalation"][0]
    suppression, message = world.rows["connectors.suppression"][0], world.rows["connectors.inboundmessage"][0]
    log_in(studio_user("vic", role=roles.VIEWER, organizations=[world.acme]))

    for path in (f"/admin/runs/run/{run.pk}/change/", f"/admin/runs/escalation/{escalation.pk}/change/",
                 f"/admin/connectors/inboundmessage/{message.pk}/change/", "/admin/runs/run/"):
        page.goto(path)
        assert page.locator(WRITE_CONTROLS).count() == 0, f"a write control on {path}"

    for path in (f"/admin/connectors/suppression/{suppression.pk}/lift/",
                 f"/admin/connectors/inboundmessage/{message.pk}/attach/", "/admin/connectors/identity/add/"):
        assert page.goto(path).status == 403, path
    post_as_page(page, "/admin/runs/run/", {"action": "cancel_runs", "_selected_action": run.pk})  # no such action
    assert post_as_page(page, f"/admin/runs/escalation/{escalation.pk}/change/",
                        {"_option": "resume", "text": "carry on"}) == 403
    assert post_as_page(page, f"/admin/connectors/suppression/{suppression.pk}/lift/", {"reason": "x"}) == 403

    run.refresh_from_db()
    escalation.refresh_from_db()
    assert run.status != RunStatus.CANCELLED and escalation.status == EscalationStatus.OPEN
    assert Suppression.objects.filter(pk=suppression.pk).exists()


def test_a_support_user_sees_only_their_organization(page, studio_user, log_in):
    world = build_world()
    acme_run, globex_run = world.rows["runs.run"]
    log_in(studio_user("sue", role=roles.SUPPORT, organizations=[world.acme]))

    for path in ("/admin/runs/escalation/", "/admin/connectors/inboundmessage/", "/admin/runs/run/"):
        page.goto(path)
        text = page.locator("#content").inner_text().lower()
        assert "acme" in text and "globex" not in text, path
    page.click(f"#result_list a[href$='/{acme_run.pk}/change/']")
    assert "Collect the acme W-9" in page.locator("#content").inner_text()

    assert page.goto(f"/admin/runs/run/{globex_run.pk}/timeline/").status == 404
    assert page.locator("#studio-not-found").is_visible()
