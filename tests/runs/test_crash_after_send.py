"""A worker killed right after the provider accepted an SMS: the next worker adopts it, or a human decides.

The first worker is a forked child running the real advance_run with
LUCIA_FAULTS=after_provider_call: it exits 137 (as if SIGKILLed) after
Twilio's fake accepted the message and before the outbox row was recorded.
The parent expires the dead worker's lease and runs advance_run itself.
"""

import multiprocessing
import os

import pytest
from django.db import connection, connections

from runs import escalations, faults, worker
from runs.models import Episode, EpisodeStatus, Escalation, OutboxMessage, OutboxStatus, Run, RunStatus
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"
    # Recovery itself, not its timing (tests/runs/test_provider_faults.py): look up at once, and a lookup
    # the provider cannot answer asks a human straight away.
    settings.LUCIA_SEND_SETTLE_SECONDS = 0
    settings.LUCIA_SEND_LOOKUP_TRIES = 1
    settings.LUCIA_FAULTS = []


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


def _worker_killed_at(point: str, run_id: int) -> int:
    """Run advance_run in a forked child with the fault armed; returns its exit code."""
    connections.close_all()  # the child opens its own connection; a shared socket would corrupt both

    def child() -> None:
        from django.conf import settings

        settings.LUCIA_FAULTS = [point]
        worker.advance_run(run_id, owner="doomed-worker")

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(timeout=60)
    return process.exitcode


def _expire_lease(run_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [run_id])


def _crashed_sms_run(twilio) -> tuple[Run, Episode]:
    run = s.real_run()
    s.sms_identity(run.organization, twilio)
    start = h.add_episode(run, "start", {"channel": "sms"})
    assert _worker_killed_at("after_provider_call", run.pk) == faults.KILLED_EXIT_CODE
    # What the dead worker left: the provider has the message, the row says it was being sent.
    assert len(twilio.messages) == 1
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENDING
    assert Episode.objects.get(pk=start.pk).status == EpisodeStatus.RUNNING
    _expire_lease(run.pk)
    return run, start


def test_a_crash_after_the_provider_call_is_adopted_with_exactly_one_message(twilio):
    run, start = _crashed_sms_run(twilio)

    assert worker.advance_run(run.pk, owner="second-worker") is True

    assert len(twilio.messages) == 1 and s.creates(twilio) == 1
    row = OutboxMessage.objects.get(run=run)
    assert row.status == OutboxStatus.SENT and row.provider_message_id == twilio.messages[0]["sid"]
    assert Episode.objects.get(pk=start.pk).status == EpisodeStatus.DONE


def test_a_crash_with_the_lookup_down_waits_for_a_human_then_sends_once_when_told_not_sent(twilio):
    run, _ = _crashed_sms_run(twilio)
    twilio.fail_with(500)  # the list call of the lookup fails

    worker.advance_run(run.pk, owner="second-worker")

    assert s.creates(twilio) == 1
    row = OutboxMessage.objects.get(run=run)
    assert row.status == OutboxStatus.UNCERTAIN
    escalation = Escalation.objects.get(run=run, kind="uncertain_send")
    assert escalation.outbox_message_id == row.pk
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN

    twilio.fail_with(None)
    escalations.resolve(escalation, outcome="not_sent", via="admin")
    worker.advance_run(run.pk, owner="third-worker")
    worker.advance_run(run.pk, owner="fourth-worker")

    assert s.creates(twilio) == 2  # the one the human ordered, and only that one
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.SENT


def test_a_crash_with_the_lookup_down_sends_nothing_more_when_told_it_was_sent(twilio):
    run, _ = _crashed_sms_run(twilio)
    twilio.fail_with(500)
    worker.advance_run(run.pk, owner="second-worker")
    twilio.fail_with(None)

    escalations.resolve(Escalation.objects.get(run=run, kind="uncertain_send"), outcome="sent", via="admin")
    worker.advance_run(run.pk, owner="third-worker")

    assert s.creates(twilio) == 1
    assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENT


def test_a_once_fault_fires_in_one_process_only(tmp_path, settings):
    settings.LUCIA_FAULTS_DIR = str(tmp_path)
    settings.LUCIA_FAULTS = ["after_record:once"]

    def child() -> None:
        faults.point("after_record")
        os._exit(0)

    codes = []
    for _ in range(2):
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(timeout=10)
        codes.append(process.exitcode)

    assert codes == [faults.KILLED_EXIT_CODE, 0]
    faults.point("before_provider_call")  # not named: returns


def test_a_killed_worker_is_reaped_and_its_episode_replays_journaled_model_calls_without_new_requests(
        twilio, settings):
    from runs import dispatch
    from runs.models import JournalEntry
    from tests.fakes.openai_server import FakeOpenAIServer, completion

    with FakeOpenAIServer() as model_server:
        settings.LUCIA_LLM = "openai"
        settings.OPENAI_BASE_URL = model_server.base_url
        settings.OPENAI_API_KEY = "test-key"
        plan = s.open_plan()
        plan["model"]["provider"] = "openai"
        run = s.real_run(plan)
        s.sms_identity(run.organization, twilio)
        start = h.add_episode(run, "start", {"channel": "sms"})
        model_server.enqueue(completion(tool_calls=[("send_sms", s.SMS)]), completion(content="Asked for the W-9."))

        assert _worker_killed_at("after_provider_call", run.pk) == faults.KILLED_EXIT_CODE
        assert model_server.request_count == 1 and len(twilio.messages) == 1
        _expire_lease(run.pk)

        assert dispatch.reap_expired() == 1
        assert worker.advance_run(run.pk, owner="second-worker") is True

        # The first model call was replayed from the journal; only the turn after the send was new.
        assert model_server.request_count == 2
        calls = JournalEntry.objects.filter(run=run, kind="model_call")
        assert [(c.model_provider, c.tokens_in) for c in calls] == [("openai", 120), ("openai", 120)]
        assert s.creates(twilio) == 1
        assert Episode.objects.get(pk=start.pk).status == EpisodeStatus.DONE
        assert Episode.objects.get(pk=start.pk).attempts == 2
