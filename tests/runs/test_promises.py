"""Promises, absences, acknowledgements, claims and completion, through real runs of the document collector.

The run is simulated (virtual clock, sandbox sends) and every episode goes
through the worker, the agent loop, the scripted model and the ToolExecutor.
Tuesday 2025-03-04 10:00 in Chicago is the start.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from runs import promises, submissions, worker
from runs.models import (
    Contact,
    Episode,
    EpisodeKind,
    EpisodeStatus,
    Escalation,
    EscalationStatus,
    JournalEntry,
    OutboxMessage,
    Run,
    RunStatus,
)
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db
CHICAGO = ZoneInfo("America/Chicago")


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


def _reply(run: Run, text: str, *, key: str, files: list | None = None) -> None:
    submissions.record(Run.objects.get(pk=run.pk), kind=EpisodeKind.INBOUND, dedupe_key=key, sender=h.VENDOR_EMAIL,
                       channel="email", text=text, files=files or [], extra={"subject": "Re: W-9"})
    worker.advance_run(run.pk)


def _at(run: Run, now: datetime) -> Run:
    Run.objects.filter(pk=run.pk).update(virtual_now=now)
    worker.advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def _vendor(run: Run) -> Contact:
    return Contact.objects.get(run=run, role="vendor")


def _next_followup(run: Run) -> Episode:
    return Episode.objects.get(run=run, kind=EpisodeKind.FOLLOWUP, status=EpisodeStatus.QUEUED)


def _sent(run: Run) -> list[OutboxMessage]:
    return list(OutboxMessage.objects.filter(run=run, status="sent").order_by("pk"))


def _started(run: Run) -> Run:
    h.add_episode(run, "start")
    worker.advance_run(run.pk)
    assert len(_sent(run)) == 1
    return run


def test_a_promise_pauses_chasing_until_its_date_plus_the_grace():
    run = _started(h.make_run())

    _reply(run, "Sorry! I will send it on the 14th.", key="promise")

    [promise] = _vendor(run).history
    assert (promise["kind"], promise["task_key"], promise["due"]) == ("promise", "collect_w9", "2025-03-14")
    # Friday the 14th plus two business days: Tuesday the 18th, 09:00 in Chicago (plus the run's offset).
    check_at = datetime.fromisoformat(promise["check_at"]).astimezone(CHICAGO)
    assert check_at.date().isoformat() == "2025-03-18" and (check_at.hour, check_at.minute // 5) == (9, 0)
    assert _next_followup(run).due_at == check_at
    assert JournalEntry.objects.filter(run=run, kind="note", data__promise="recorded").exists()
    call = JournalEntry.objects.filter(run=run, kind="model_call").order_by("-seq").first()
    assert call.data["reply"]["raw"]["scripted"]["classification"]["intent"] == "promise"
    # A promise is not evidence: the task stays open, and no thank-you answers it (acknowledge: on_completion).
    assert run.tasks.get().status == "open"
    assert len(_sent(run)) == 1


def test_a_reply_during_a_promise_does_not_bring_the_chase_forward():
    run = _started(h.make_run())
    _reply(run, "I will send it on the 14th.", key="promise")
    check_at = _next_followup(run).due_at

    _reply(run, "Ok, noted, thanks.", key="ok")

    assert _next_followup(run).due_at >= check_at


def test_a_broken_promise_is_checked_then_the_ladder_resumes_then_a_human():
    run = _started(h.make_run())
    _reply(run, "I will send it on the 14th.", key="promise-1")
    check_at = _next_followup(run).due_at

    run = _at(run, check_at)

    kinds = [entry["kind"] for entry in _vendor(run).history]
    assert kinds == ["promise", "promise_broken"]
    check = _sent(run)[-1]
    assert "2025-03-14" in check.payload["body"] and "Did it go through?" in check.payload["body"]
    assert _next_followup(run).due_at > check_at  # the ladder goes on

    # A second promise, broken again: the next check goes to a human instead of the contact.
    _reply(run, "So sorry, I will send it on Friday.", key="promise-2")
    second = _next_followup(run).due_at
    run = _at(run, second)

    assert promises.broken_count(_vendor(run).history, task_key="collect_w9") == 2
    question = Escalation.objects.get(run=run, status=EscalationStatus.OPEN)
    assert "promises" in question.prompt
    assert run.status == RunStatus.WAITING_HUMAN


def test_an_absence_with_a_relative_return_holds_every_outreach_until_then():
    run = _started(h.make_run())

    _reply(run, "I am not available for 2 weeks.", key="away")

    [absence] = _vendor(run).history
    back = datetime.fromisoformat(absence["until"])
    assert back.astimezone(CHICAGO).date().isoformat() == "2025-03-18"
    assert _next_followup(run).due_at >= back
    result, _ = s.dispatch(run, h.add_episode(run, "followup"), "send_email", s.EMAIL)
    assert result["status"] == "held" and OutboxMessage.objects.get(run=run, status="pending").not_before >= back


def test_a_claim_without_the_file_is_asked_again_and_a_repeat_goes_to_a_human():
    run = _started(h.make_run())

    _reply(run, "I already sent it last week.", key="claim-1")

    asked = _sent(run)[-1]
    assert "send it again" in asked.payload["body"]
    assert not Escalation.objects.filter(run=run).exists()

    _reply(run, "I told you, I already sent it.", key="claim-2")

    question = Escalation.objects.get(run=run, status=EscalationStatus.OPEN)
    assert "not evidence" in question.prompt


def test_a_legal_threat_goes_to_a_human_and_is_not_an_opt_out():
    run = _started(h.make_run())

    _reply(run, "Stop contacting me or I will sue.", key="threat")

    question = Escalation.objects.get(run=run, status=EscalationStatus.OPEN)
    assert "legal action" in question.prompt
    assert _vendor(run).history == []  # no opt-out recorded: a human decides
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN


def test_completion_resolves_every_open_question_of_the_run():
    run = _started(h.make_run())
    _reply(run, "Wrong number, who is this?", key="who")
    question = Escalation.objects.get(run=run, status=EscalationStatus.OPEN)

    _reply(run, "Sorry, my mistake. Signed W-9 attached.", key="pdf", files=[h.PDF])

    run = Run.objects.get(pk=run.pk)
    assert run.status == RunStatus.COMPLETED
    question.refresh_from_db()
    assert question.status == EscalationStatus.RESOLVED and question.answered_via == "runtime"
    assert "the run completed" in question.answer
    assert not Escalation.objects.filter(run=run, status=EscalationStatus.OPEN).exists()
    assert JournalEntry.objects.filter(run=run, kind="note", data__escalations=[question.pk]).exists()


@pytest.mark.parametrize(("mode", "body", "sent"), [
    ("on_completion", "Thanks, noted.", False),
    ("never", "Thanks, noted.", False),
    ("every_reply", "Thanks, noted.", True),
    ("never", "Thanks. Could you attach the W-9 again?", True),
])
def test_the_acknowledge_setting_is_obeyed_for_any_models_sends(mode, body, sent):
    run = h.make_run(h.template_plan(acknowledge=mode))
    episode = h.inbound(run, "Will do.")

    result, _ = s.dispatch(run, episode, "send_email", {"to_role": "vendor", "subject": "Re: W-9", "body": body})

    assert (result.get("status") == "sent") is sent
    blocked = JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="acknowledge").exists()
    assert blocked is not sent


def test_the_thanks_that_completes_the_run_goes_out_under_on_completion():
    run = _started(h.make_run())

    _reply(run, "Here it is.", key="pdf", files=[h.PDF])

    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert len(_sent(run)) == 2


def test_record_promise_refuses_a_date_already_past():
    run = h.make_run()
    episode = h.inbound(run, "We paid on the 1st.")

    result, session = s.dispatch(run, episode, "record_promise", {
        "task_key": "collect_w9", "due": "2025-03-01", "what": "send the W-9", "quote": "paid on the 1st"})

    assert result["ok"] is False and "already passed" in result["error"]
    assert session.outcome.followup_override is None and _vendor(run).history == []


def test_a_promise_grace_in_calendar_days_counts_calendar_days():
    plan = h.template_plan()
    plan["followup"]["promise_grace"] = {"delay_s": 86400, "delay_business_days": 0}
    run = h.make_run(plan)
    episode = h.inbound(run, "I will send it on Saturday.")

    result, session = s.dispatch(run, episode, "record_promise", {
        "task_key": "collect_w9", "due": "2025-03-08", "what": "send the W-9", "quote": "Saturday"})

    # Saturday + 1 day is Sunday, outside the business days: checked Monday at the window's opening.
    assert result["ok"] is True
    local = session.outcome.followup_override.astimezone(CHICAGO)
    assert (local.date().isoformat(), local.hour) == ("2025-03-10", 9)


def test_a_contact_who_writes_back_before_the_return_date_is_back():
    run = _started(h.make_run())
    _reply(run, "I am out of the office until March 20th.", key="ooo")
    assert _next_followup(run).due_at.astimezone(CHICAGO).date().isoformat() == "2025-03-20"

    _reply(run, "Back early. Signed W-9 attached.", key="back", files=[h.PDF])

    assert [entry["kind"] for entry in _vendor(run).history] == ["absence", "returned"]
    # The thank-you goes out now, not on the 20th.
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert len(_sent(run)) == 2


def test_a_reexecuted_promise_episode_replays_its_model_calls_and_records_once(monkeypatch):
    provider = h.CountingProvider()
    h.use_provider(monkeypatch, provider)
    run = _started(h.make_run())
    _reply(run, "I will send it on the 14th.", key="promise")
    calls = provider.calls
    episode = Episode.objects.get(run=run, kind=EpisodeKind.INBOUND)

    Episode.objects.filter(pk=episode.pk).update(status=EpisodeStatus.QUEUED)  # as after a crash before its close
    worker.advance_run(run.pk)

    assert provider.calls == calls  # the same requests: answered from the journal
    assert [entry["kind"] for entry in _vendor(run).history] == ["promise"]
