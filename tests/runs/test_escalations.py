from datetime import timedelta

import pytest
from django.utils import timezone

from runs import answers, escalations, leases, worker
from runs.context import EpisodeOutcome
from runs.models import Episode, EpisodeStatus, Escalation, OutboxMessage, Run, RunStatus
from tests.factories import EpisodeFactory, EscalationFactory, RunFactory, TaskFactory
from tests.runs import fakes

pytestmark = pytest.mark.django_db


def _open(run: Run, **fields) -> Escalation:
    epoch = leases.claim(run.pk, owner="test")
    try:
        with leases.fence(run.pk, epoch=epoch) as locked:
            return escalations.open_escalation(locked, **({"kind": "question", "prompt": "Pay the $25 fee?"} | fields))
    finally:
        leases.release(run.pk, epoch=epoch)


def test_opening_an_escalation_puts_the_run_to_wait_for_a_human():
    run = RunFactory()
    escalation = _open(run, options=["yes", "no"])
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{escalation.pk}")
    assert (escalation.organization_id, escalation.status) == (run.organization_id, "open")
    # The agent's suggestions are kept apart; the options are the typed ones that fit a question.
    assert escalation.context["suggested_answers"] == ["yes", "no"]
    names = [option["name"] for option in escalation.options]
    assert {"resume", "guide_agent", "stop_run", "handle_myself", "stop_contacting", "use_contact"} <= set(names)
    assert "send_anyway" not in names and "retry" not in names


def test_an_answer_wakes_the_run_with_a_human_answer_episode_and_a_second_answer_is_refused():
    run = RunFactory()
    escalation = _open(run)

    answers.answer(escalation, option="resume", text="yes, paid", via="api")
    episode = Episode.objects.get(run=run, kind="human_answer")

    assert (episode.kind, episode.dedupe_key, episode.status) == ("human_answer", f"human:{escalation.pk}", "queued")
    assert episode.payload["answer"] == "yes, paid" and episode.payload["escalation_id"] == escalation.pk
    escalation = Escalation.objects.get(pk=escalation.pk)
    assert (escalation.status, escalation.answer, escalation.answered_via) == ("answered", "yes, paid", "api")
    assert escalation.answered_at is not None
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when) == (RunStatus.ACTIVE, None)
    assert fakes.queued_run_ids() == [run.pk]

    with pytest.raises(escalations.EscalationClosed):
        answers.answer(escalation, option="resume", text="no", via="admin")
    assert Escalation.objects.get(pk=escalation.pk).answer == "yes, paid"
    assert Episode.objects.filter(run=run, kind="human_answer").count() == 1


def test_the_run_keeps_waiting_while_another_question_is_open():
    run = RunFactory()
    first, second = _open(run), _open(run, prompt="Is this the right contact?")
    answers.answer(first, option="resume", text="yes", via="admin")
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{second.pk}")


def test_cancelling_wakes_the_run_so_the_policy_picks_up_again():
    run = RunFactory()
    escalation = _open(run)
    episode = escalations.cancel(escalation, via="admin")
    assert episode.payload["cancelled"] is True
    assert Escalation.objects.get(pk=escalation.pk).status == "cancelled"
    with pytest.raises(escalations.EscalationClosed):
        escalations.cancel(escalation, via="admin")


def test_an_answer_for_an_ended_run_is_recorded_without_waking_it():
    run = RunFactory()
    escalation = _open(run)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    answers.answer(escalation, option="resume", text="too late", via="api")
    assert Escalation.objects.get(pk=escalation.pk).answer == "too late"
    assert not Episode.objects.filter(run=run).exists()


@pytest.mark.parametrize(("outcome", "status"), [("sent", "sent"), ("not_sent", "pending")])
def test_resolving_an_uncertain_send_settles_the_outbox_row(outcome, status):
    run = RunFactory()
    episode = EpisodeFactory(run=run, status=EpisodeStatus.DONE)
    message = OutboxMessage.objects.create(
        idem_key=f"key-{outcome}", run=run, episode=episode, tool="send_email", channel="email",
        recipient="v@example.com", status="uncertain", created_at=timezone.now(),
    )
    escalation = _open(run, kind="uncertain_send", prompt="Was it sent?", outbox_message=message)
    with pytest.raises(answers.AnswerRefused, match="sent, not_sent"):
        answers.answer(escalation, option="resume", text="sent", via="admin")

    woken = escalations.resolve(escalation, outcome=outcome, via="admin")

    assert OutboxMessage.objects.get(pk=message.pk).status == status
    assert woken.payload["outcome"] == outcome and woken.payload["outbox_message_id"] == message.pk
    assert Escalation.objects.get(pk=escalation.pk).status == "resolved"


def test_an_unmatched_inbound_message_is_kept_for_triage_without_a_run():
    organization = RunFactory().organization
    escalation = escalations.open_unmatched(organization, inbound_message_id=77, prompt="Who is this from?")
    assert (escalation.run, escalation.kind, escalation.inbound_message_id) == (None, "unmatched_inbound", 77)


def test_asking_a_human_pauses_chasing_even_when_the_policy_wants_a_followup(monkeypatch):
    run = RunFactory()
    TaskFactory(run=run)
    EpisodeFactory(run=run, kind="start", dedupe_key="start")

    def ask_human(ctx):
        with ctx.fence() as locked:
            escalations.open_escalation(locked, kind="question", prompt="They ask for a fee. Pay it?")
        return EpisodeOutcome(escalated=True)

    fakes.install(monkeypatch, loop=fakes.FakeLoop(ask_human),
                  policy=fakes.FakePolicy(fakes.followup_in(2, now=timezone.now())))
    worker.advance_run(run.pk)

    run = Run.objects.get(pk=run.pk)
    question = Escalation.objects.get(run=run)
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{question.pk}")
    assert not Episode.objects.filter(run=run, kind="followup").exists()
    assert run.next_wake_at is None  # nothing wakes it but the human


def test_a_completed_run_resolves_its_open_escalations_newest_first_and_leaves_closed_ones_alone():
    run = RunFactory()
    older, newer = EscalationFactory(run=run), EscalationFactory(run=run)
    answered = EscalationFactory(run=run, status="answered", answer="yes")
    Escalation.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(hours=1))

    resolved = escalations.resolve_on_completion(run, note="Closed by the runtime: the run completed.")

    assert resolved == [newer.pk, older.pk]
    rows = {row.pk: row for row in Escalation.objects.filter(run=run)}
    assert {rows[pk].status for pk in resolved} == {"resolved"}
    assert {rows[pk].answered_via for pk in resolved} == {"runtime"}
    assert (rows[answered.pk].status, rows[answered.pk].answer) == ("answered", "yes")
    assert escalations.resolve_on_completion(run, note="again") == []


def test_the_runtime_resolves_a_notice_once():
    notice = EscalationFactory(run=RunFactory())
    at = timezone.now()
    assert escalations.resolve_by_runtime(notice.pk, note="the model answered again", at=at) == 1
    assert escalations.resolve_by_runtime(notice.pk, note="again", at=at) == 0
    notice.refresh_from_db()
    assert (notice.status, notice.answer, notice.answered_at) == ("resolved", "the model answered again", at)
