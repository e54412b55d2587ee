"""A support agent clears the escalation review queue with its buttons, in chromium."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from runs.models import Episode, Escalation, EscalationStatus, OutboxMessage, OutboxStatus
from tests.runs import answer_helpers as a
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


@pytest.fixture
def support(studio_user):
    """A Support user of one organization (explicit permissions: the roles' groups are another branch's)."""

    def make(organization):
        user = studio_user("sam", organizations=[organization])
        user.user_permissions.add(*Permission.objects.filter(
            content_type__app_label="runs", codename__in=["view_escalation", "change_escalation", "view_run"]))
        return user

    return make


def test_answer_escalations_with_buttons(page, support, log_in):
    run = s.real_run()
    guided = a.open_question(run, prompt="The vendor asks for a fee. Pay it?")
    Escalation.objects.filter(pk=guided.pk).update(created_at=timezone.now() - timedelta(hours=6))
    replied = a.open_question(s.real_run(organization=run.organization), prompt="Vendor asks who we are")
    log_in(support(run.organization))

    page.goto("/admin/runs/escalation/?status=open")
    first_row = page.locator("#result_list tbody tr").first
    assert "The vendor asks for a fee" in first_row.inner_text()  # the oldest first
    assert first_row.locator("[data-sla=breached]").is_visible()

    first_row.locator("a", has_text=str(guided.pk)).first.click()
    page.fill("#guide_agent-text", "Say the fee is waived")
    page.click("#option-guide_agent button[data-option=guide_agent]")
    page.wait_for_url("**/admin/runs/escalation/?**")
    assert "“Guide the agent” done" in page.locator(".messagelist").inner_text()

    page.goto(f"/admin/runs/escalation/{replied.pk}/change/")
    page.fill("#reply_to_contact-text", "Hi Dana, we are Acme's accounts team.")
    page.click("#option-reply_to_contact button[data-option=reply_to_contact]")
    assert "exactly as written" in page.locator("#preview").inner_text()
    assert Escalation.objects.get(pk=replied.pk).status == EscalationStatus.OPEN
    page.click("#confirm")
    page.wait_for_url("**/admin/runs/escalation/?**")

    [guidance] = Episode.objects.filter(run=run, kind="human_answer")
    assert guidance.payload["guidance"] == "Say the fee is waived"
    [reply] = Episode.objects.filter(run=replied.run, kind="human_answer")
    assert reply.payload["human_send"]["payload"]["body"] == "Hi Dana, we are Acme's accounts team."


def test_resolve_an_uncertain_send(page, support, log_in):
    run = s.real_run()
    episode = h.add_episode(run, "start")
    a.finish_episode(episode)
    row = OutboxMessage.objects.create(
        idem_key="doubt", run=run, episode=episode, tool="send_sms", channel="sms", recipient="+15555550101",
        status=OutboxStatus.UNCERTAIN, created_at=timezone.now(), attempts=1, payload={"body": "Hi Dana, the W-9?"},
        error="the provider could not say whether it was sent")
    doubt = a.open_question(run, kind="uncertain_send", prompt="Was it sent?", outbox_message=row, context={
        "outbox_message_id": row.pk,
        "provider_lookup": {"said": "the provider could not be asked (3 lookup(s) failed: unreachable or erroring)",
                            "lookups": 3}})
    log_in(support(run.organization))

    page.goto(f"/admin/runs/escalation/{doubt.pk}/change/")
    assert "could not be asked (3 lookup(s) failed" in page.locator("#provider-lookup").inner_text()
    page.click("#option-not_sent button[data-option=not_sent]")
    assert "again" in page.locator("#preview").inner_text() and "Hi Dana, the W-9?" in page.locator(
        "#preview").inner_text()
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.UNCERTAIN
    page.click("#confirm")
    page.wait_for_url("**/admin/runs/escalation/?**")

    assert "“It was not sent” done" in page.locator(".messagelist").inner_text()
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.PENDING
    assert Escalation.objects.get(pk=doubt.pk).status == EscalationStatus.RESOLVED
