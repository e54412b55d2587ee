"""Approval mode: a send waits as a draft until a human approves, edits or rejects it (runs.approvals)."""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from connectors.models import SandboxMessage
from runs import answers, approvals, escalations, events, worker
from runs.models import (
    Episode,
    EpisodeKind,
    Escalation,
    EscalationKind,
    EscalationStatus,
    JournalEntry,
    JournalKind,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
)
from tests.fakes.openai_server import FakeOpenAIServer, completion
from tests.runs import approval_helpers as a
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s


@pytest.mark.django_db
def test_with_approval_on_the_first_message_waits_as_a_draft_and_the_run_sleeps_on_human_approval(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))

    draft = OutboxMessage.objects.get(run=run)
    assert draft.status == OutboxStatus.AWAITING_APPROVAL
    assert SandboxMessage.objects.count() == 0
    escalation = a.open_approval(run)
    assert escalation.outbox_message_id == draft.pk
    assert escalation.context["draft"]["recipient"] == h.VENDOR_EMAIL
    assert escalation.context["draft"]["channel"] == "email"
    assert escalation.context["draft"]["text"] == draft.payload["body"] and "W-9" in draft.payload["body"]
    assert [option["name"] for option in escalation.options] == ["approve", "edit", "reject"]
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, "human:approval")


@pytest.mark.django_db
def test_an_approved_draft_goes_out_once_as_written_and_the_ladder_resumes_from_then(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))
    draft = OutboxMessage.objects.get(run=run)
    user = get_user_model().objects.create_user("olivia", password="x-long-password-123")

    answers.answer(option="approve", escalation=a.open_approval(run), by_user=user, via="admin")
    approved_at = h.BUSINESS_HOURS + timedelta(hours=2)
    run = a.advanced_at(run, approved_at)

    draft.refresh_from_db()
    assert draft.status == OutboxStatus.SENT and draft.attempts == 1
    [sent] = SandboxMessage.objects.all()
    assert (sent.idem_key, sent.payload["body"]) == (draft.idem_key, draft.payload["body"])
    entry = JournalEntry.objects.get(run=run, kind=JournalKind.APPROVAL)
    assert entry.data["decision"] == "approved" and entry.data["by_username"] == "olivia"
    # The ladder counts from when the message went out: step 1 is three business days after the approval.
    assert run.status == RunStatus.WAITING and run.wake_when.startswith("followup:")
    assert a.next_followup(run).due_at >= approved_at + timedelta(days=3)
    with pytest.raises(escalations.EscalationClosed):
        answers.answer(option="approve", escalation=Escalation.objects.get(pk=_open_approval_pk(run)), via="api")
    assert SandboxMessage.objects.count() == 1


def _open_approval_pk(run: Run) -> int:
    return Escalation.objects.get(run=run, kind=EscalationKind.APPROVAL).pk


@pytest.mark.django_db
def test_an_edited_draft_sends_the_edited_text_and_journals_who_edited_it(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))
    draft = OutboxMessage.objects.get(run=run)
    original = draft.payload["body"]
    user = get_user_model().objects.create_user("marta", password="x-long-password-123")
    edited = "Hi Dana, a quick note from Marta: could you send the signed W-9 this week?"

    answers.answer(option="edit", escalation=a.open_approval(run), text=edited, data={"subject": "W-9, please"},
                   by_user=user, via="api")
    run = a.advanced_at(run, h.BUSINESS_HOURS + timedelta(minutes=30))

    [sent] = SandboxMessage.objects.all()
    assert sent.idem_key == draft.idem_key
    assert (sent.payload["body"], sent.payload["subject"]) == (edited, "W-9, please")
    entry = JournalEntry.objects.get(run=run, kind=JournalKind.APPROVAL)
    assert entry.data["decision"] == "edited" and entry.data["by_username"] == "marta"
    assert entry.data["original"]["body"] == original and entry.data["edited"]["body"] == edited
    assert Escalation.objects.get(pk=entry.data["escalation_id"]).answered_by == user


@pytest.mark.django_db
def test_an_edit_the_guardrail_blocks_is_refused_with_the_reason_and_the_draft_keeps_waiting(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))
    escalation = a.open_approval(run)

    with pytest.raises(approvals.EditRefused, match="foreign_reference.*payme@evil.example"):
        answers.answer(option="edit", escalation=escalation, text="Send the W-9 to payme@evil.example instead.",
                       via="api")
    with pytest.raises(approvals.EditRefused, match="legal_threat"):
        answers.answer(option="edit", escalation=escalation, text="Send it or we take legal action.", via="api")
    with pytest.raises(approvals.EditRefused, match="forbidden phrases: 'penalty'"):
        answers.answer(option="edit", escalation=escalation, text="Send it this week to avoid a penalty.", via="api")

    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.AWAITING_APPROVAL
    assert not JournalEntry.objects.filter(run=run, kind=JournalKind.APPROVAL).exists()
    assert SandboxMessage.objects.count() == 0


@pytest.mark.django_db
def test_a_rejected_draft_is_never_sent_and_the_agent_reads_the_guidance_on_its_next_episode(monkeypatch):
    run, model = a.started(monkeypatch, a.plan("all"))
    guidance = "Mention that the portal upload at the vendor page also works."

    answers.answer(option="reject", escalation=a.open_approval(run), text=guidance, via="api")
    run = a.advanced_at(run, h.BUSINESS_HOURS + timedelta(hours=1))

    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.REJECTED
    assert SandboxMessage.objects.count() == 0
    assert guidance in model.texts[-1]  # the human_answer episode's request
    entry = JournalEntry.objects.get(run=run, kind=JournalKind.APPROVAL)
    assert (entry.data["decision"], entry.data["guidance"]) == ("rejected", guidance)
    # The ladder goes on: its next step writes a new draft, which waits for approval again.
    followup = a.next_followup(run)
    run = a.advanced_at(run, followup.due_at)
    drafts = OutboxMessage.objects.filter(run=run).order_by("id")
    assert [d.status for d in drafts] == [OutboxStatus.REJECTED, OutboxStatus.AWAITING_APPROVAL]
    assert guidance not in drafts[1].payload["body"]
    assert a.open_approval(run).outbox_message_id == drafts[1].pk
    assert SandboxMessage.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(("mode", "second_waits"), [("first_message", False), ("all", True)])
def test_first_message_needs_approval_once_per_contact_and_all_needs_it_every_time(monkeypatch, mode, second_waits):
    run, _ = a.started(monkeypatch, a.plan(mode))
    answers.answer(option="approve", escalation=a.open_approval(run), via="api")
    run = a.advanced_at(run, h.BUSINESS_HOURS + timedelta(minutes=5))
    assert SandboxMessage.objects.count() == 1

    run = a.advanced_at(run, a.next_followup(run).due_at)

    second = OutboxMessage.objects.filter(run=run).order_by("id")[1]
    if second_waits:
        assert second.status == OutboxStatus.AWAITING_APPROVAL and SandboxMessage.objects.count() == 1
        assert run.wake_when == "human:approval"
    else:
        assert second.status == OutboxStatus.SENT and SandboxMessage.objects.count() == 2
        assert Escalation.objects.filter(run=run, kind=EscalationKind.APPROVAL).count() == 1


@pytest.mark.django_db
def test_a_channel_setting_overrides_the_agent_setting(monkeypatch):
    plan = a.plan("none", email="all")
    assert approvals.mode_for(plan, channel="email") == "all"
    assert approvals.mode_for(plan, channel="sms") == "none"
    run, _ = a.started(monkeypatch, plan)
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.AWAITING_APPROVAL


@pytest.mark.django_db
def test_without_approvals_a_message_goes_out_at_once(monkeypatch):
    run, _ = a.started(monkeypatch, h.template_plan())
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENT
    assert not Escalation.objects.filter(run=run, kind=EscalationKind.APPROVAL).exists()


@pytest.mark.django_db
def test_an_approval_is_not_answered_with_free_text(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))
    with pytest.raises(answers.AnswerRefused, match="does not fit .* use one of approve, edit, reject"):
        answers.answer(a.open_approval(run), option="guide_agent", text="looks fine", via="api")
    with pytest.raises(answers.AnswerRefused, match="reject needs text"):
        answers.answer(option="reject", escalation=a.open_approval(run), text="  ", via="api")
    assert a.open_approval(run).status == EscalationStatus.OPEN


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


@pytest.mark.django_db(transaction=True)
def test_two_people_approving_at_once_send_the_draft_exactly_once(twilio, monkeypatch):
    plan = s.open_plan()
    plan["approvals"] = {"outbound": "all", "channels": {}}
    run = s.real_run(plan)
    s.sms_identity(run.organization, twilio)
    h.use_provider(monkeypatch, a.Sender("send_sms", s.SMS))
    events.record_event(run, kind=EpisodeKind.START, payload={}, dedupe_key="start")
    worker.advance_run(run.pk)
    escalation = a.open_approval(run)
    assert s.creates(twilio) == 0

    both = threading.Barrier(2, timeout=30)
    outcomes, errors = [], []

    def approve() -> None:
        try:
            both.wait()
            answers.answer(option="approve", escalation=Escalation.objects.get(pk=escalation.pk), via="api")
            outcomes.append("approved")
        except escalations.EscalationClosed:
            outcomes.append("closed")
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    worker.advance_run(run.pk)
    worker.advance_run(run.pk)

    assert errors == []
    assert sorted(outcomes) == ["approved", "closed"]
    assert s.creates(twilio) == 1
    [message] = twilio.messages
    assert message["body"].startswith(s.SMS["body"]) and message["to"] == s.VENDOR_NUMBER
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENT
    assert Episode.objects.filter(run=run, kind=EpisodeKind.HUMAN_ANSWER).count() == 1


@pytest.mark.django_db
def test_the_api_approves_edits_and_refuses_a_blocked_edit_with_a_400(monkeypatch):
    from rest_framework.test import APIClient

    from tests.factories import api_key_for

    run, _ = a.started(monkeypatch, a.plan("all"))
    escalation = a.open_approval(run)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(run.organization)}")
    url = f"/api/v1/escalations/{escalation.pk}/answer/"

    blocked = client.post(url, {"option": "edit", "text": "Or we take legal action."}, format="json")
    assert blocked.status_code == 400 and "legal_threat" in blocked.json()["detail"]
    assert client.post(url, {"option": "send_anyway"}, format="json").status_code == 400
    assert client.post(url, {"answer": "ok"}, format="json").status_code == 400
    assert a.open_approval(run).pk == escalation.pk

    done = client.post(url, {"option": "edit", "text": "Hi Dana, the W-9 please."}, format="json")
    assert done.status_code == 200 and done.json()["status"] == "answered"
    assert client.post(url, {"option": "approve"}, format="json").status_code == 409
    run = a.advanced_at(run, h.BUSINESS_HOURS + timedelta(minutes=10))
    [sent] = SandboxMessage.objects.all()
    assert sent.payload["body"] == "Hi Dana, the W-9 please."
    entry = JournalEntry.objects.get(run=run, kind=JournalKind.APPROVAL)
    assert (entry.data["via"], entry.data["by_key"]) == ("api", Escalation.objects.get(pk=escalation.pk)
                                                         .answered_by_key_id)
    assert entry.data["by_key"] is not None


@pytest.mark.django_db
def test_the_studio_shows_the_draft_and_rejects_it_with_guidance(monkeypatch, client):
    run, _ = a.started(monkeypatch, a.plan("all"))
    escalation = a.open_approval(run)
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "x-long-password-123")
    client.force_login(user)
    page = f"/admin/runs/escalation/{escalation.pk}/change/"

    shown = client.get(page).content.decode()
    assert "Approve and send" in shown and "Edit and send" in shown and h.VENDOR_EMAIL in shown
    response = client.post(page, {"_option": "reject", "text": "Ask about the portal instead."})

    assert response.status_code == 302
    escalation.refresh_from_db()
    assert (escalation.status, escalation.answered_by, escalation.answer) == (
        EscalationStatus.ANSWERED, user, "Ask about the portal instead.")
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.REJECTED


@contextlib.contextmanager
def _guardrail_model(settings, *verdicts: str):
    """The guardrail's model: the real OpenAI client against a fake server that answers `verdicts` in turn."""
    with FakeOpenAIServer() as server:
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "test"
        settings.LUCIA_GUARDRAIL_MODEL = "gpt-4o-mini"
        for verdict in verdicts:
            server.enqueue(completion(content=verdict))
        yield server


@pytest.mark.django_db
def test_with_a_guardrail_model_the_edit_is_judged_by_it_and_its_block_refuses_the_edit(monkeypatch, settings):
    run, _ = a.started(monkeypatch, a.plan("all"))
    monkeypatch.undo()  # the guardrail asks the real OpenAI client, here against the fake server
    escalation = a.open_approval(run)
    with _guardrail_model(settings, '{"allow": false, "reason": "pressures the vendor"}',
                          '{"allow": true, "reason": "polite"}') as server:
        with pytest.raises(approvals.EditRefused, match="pressures the vendor"):
            answers.answer(option="edit", escalation=escalation, text="Send the W-9 today, no excuses.", via="api")
        answers.answer(option="edit", escalation=escalation, text="Could you send the W-9 when you can?", via="api")

    assert [r["messages"][1]["content"] for r in server.requests][0].count("no excuses") == 1
    assert JournalEntry.objects.filter(run=run, kind=JournalKind.MODEL_CALL, model_provider="openai").count() == 2
    entry = JournalEntry.objects.get(run=run, kind=JournalKind.APPROVAL)
    assert entry.data["guardrail"]["allowed"] is True  # the model judged it before the answer was taken
    run.refresh_from_db()
    assert run.lease_owner is None  # the review's lease is given back
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.PENDING


@pytest.mark.django_db
def test_a_draft_of_a_run_that_ended_is_not_approved(monkeypatch):
    run, _ = a.started(monkeypatch, a.plan("all"))
    # Completed while the draft waited (the vendor's reply did the task); the question stays open.
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)

    with pytest.raises(ValueError, match="the run has ended"):
        answers.answer(option="approve", escalation=a.open_approval(run), via="api")
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.AWAITING_APPROVAL
    assert SandboxMessage.objects.count() == 0


@pytest.mark.django_db
def test_an_edit_whose_review_lost_the_run_s_lease_is_refused_and_its_verdict_not_journaled(monkeypatch, settings):
    """The guardrail model's verdict is journaled under the review's lease, owner and epoch both: a review whose
    lease another holder has by then (here the same epoch under another owner) writes nothing and refuses the
    edit, to be submitted again, instead of failing with an error."""
    run, _ = a.started(monkeypatch, a.plan("all"))
    monkeypatch.undo()
    escalation = a.open_approval(run)
    h.lose_claims(monkeypatch)
    with (_guardrail_model(settings, '{"allow": true, "reason": "polite"}') as server,
          pytest.raises(approvals.EditRefused, match="submit the edit again")):
        answers.answer(option="edit", escalation=escalation, text="Could you send the W-9 when you can?", via="api")

    assert len(server.requests) == 1  # the review had the lease and asked the model: its write was refused
    assert not JournalEntry.objects.filter(run=run, kind=JournalKind.MODEL_CALL, model_provider="openai").exists()
    run.refresh_from_db()
    assert run.lease_owner == "successor"  # the review gives back only a lease of its own
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.AWAITING_APPROVAL
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN
