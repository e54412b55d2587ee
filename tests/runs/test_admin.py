import pytest
from django.contrib.auth.models import User

from runs import leases
from runs.models import Episode, EscalationKind, Run
from tests.factories import deployed_agent

pytestmark = pytest.mark.django_db

VENDOR = {"role": "vendor", "name": "Vera", "email": "vera@example.com", "timezone": "Europe/Paris"}


@pytest.fixture
def staff_client(client):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)
    return client


def _run() -> Run:
    from runs import starts

    organization, deployment = deployed_agent()
    return starts.start_run(organization, deployment=deployment, goal="Collect the W-9", contacts=[VENDOR])


def test_run_pages_render_read_only_with_a_timeline(staff_client):
    run = _run()
    for url in ("/admin/runs/run/", f"/admin/runs/run/{run.pk}/change/", f"/admin/runs/run/{run.pk}/timeline/",
                "/admin/runs/episode/", "/admin/runs/journalentry/", "/admin/runs/outboxmessage/",
                "/admin/runs/escalation/"):
        assert staff_client.get(url).status_code == 200, url
    page = staff_client.get(f"/admin/runs/run/{run.pk}/timeline/").content.decode()
    assert "start #1" in page
    assert staff_client.get("/admin/runs/run/?q=vera@example.com").context["cl"].result_count == 1


def test_an_escalation_is_answered_from_its_admin_page(staff_client):
    from runs import escalations

    run = _run()
    epoch = leases.claim(run.pk, owner="w")
    with leases.fence(run.pk, epoch=epoch) as locked:
        escalation = escalations.open_escalation(locked, kind=EscalationKind.QUESTION, prompt="Which address?")
    leases.release(run.pk, epoch=epoch)

    response = staff_client.post(f"/admin/runs/escalation/{escalation.pk}/change/",
                                 {"_option": "resume", "text": "the new one"})

    assert response.status_code == 302
    escalation.refresh_from_db()
    assert (escalation.status, escalation.answer, escalation.answered_via) == ("answered", "the new one", "admin")
    assert Episode.objects.filter(run=run, kind="human_answer").count() == 1


def test_cancel_action_asks_for_a_reason_then_cancels_open_runs(staff_client):
    run = _run()
    asked = staff_client.post("/admin/runs/run/", {"action": "cancel_runs", "_selected_action": [run.pk]})
    assert asked.status_code == 200 and b'id="confirm-cancel"' in asked.content
    assert Run.objects.get(pk=run.pk).status == "active"

    response = staff_client.post("/admin/runs/run/", {"action": "cancel_runs", "_selected_action": [run.pk],
                                                      "confirmed": "yes", "reason": "duplicate of run 7"})
    assert response.status_code == 302
    cancelled = Run.objects.get(pk=run.pk)
    assert (cancelled.status, cancelled.outcome) == ("cancelled", "duplicate of run 7")


def test_a_provider_outage_shows_once_in_the_escalation_inbox_with_its_channel(staff_client):
    from runs import escalations
    from tests.factories import OrganizationFactory

    organization = OrganizationFactory()
    for _ in range(3):  # three failing sends, one alert
        escalations.raise_outage(organization.pk, channel="sms", error="Twilio unreachable")

    response = staff_client.get("/admin/runs/escalation/?kind=provider_outage&status=open")

    assert response.status_code == 200
    [alert] = response.context["cl"].result_list
    assert (alert.channel, alert.organization_id, alert.run_id) == ("sms", organization.pk, None)
    assert staff_client.get(f"/admin/runs/escalation/{alert.pk}/change/").status_code == 200
