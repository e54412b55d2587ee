"""Per-contact caps hold when two runs write to the same person at the same instant (real threads): a new send,
and a held one whose time has come."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs import compliance, outbox, tool_executor
from runs.models import JournalEntry, OutboxMessage, OutboxStatus
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


def _race(work, *, step, wait_after, monkeypatch) -> tuple[dict, list]:
    """Run `step(run, episode, epoch)` for each item of `work` in its own thread, all of them waiting for each other
    right after `wait_after` (a module attribute, as (module, name)) returned: the instant between deciding a send
    and recording it, which the address's lock must close."""
    both_decided = threading.Barrier(len(work), timeout=30)
    module, name = wait_after
    original = getattr(module, name)

    def then_wait(*args, **kwargs):
        result = original(*args, **kwargs)
        both_decided.wait()
        return result

    monkeypatch.setattr(module, name, then_wait)
    results, errors = {}, []

    def run_step(run, episode, epoch):
        try:
            results[run.pk] = step(run, episode, epoch)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_step, args=item) for item in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_two_runs_racing_to_the_same_contact_send_only_what_the_cap_allows(twilio, monkeypatch):
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5})
    first = s.real_run(plan)
    second = s.real_run(plan, organization=first.organization)
    s.sms_identity(first.organization, twilio)
    work = [(run, h.add_episode(run, "start"), h.claim(run)) for run in (first, second)]

    # Both runs pass the decision-time cap check before either records its send: the race the lock closes.
    results, errors = _race(work, step=lambda run, episode, epoch: s.dispatch(run, episode, "send_sms", s.SMS,
                                                                              epoch=epoch)[0],
                            wait_after=(compliance, "check"), monkeypatch=monkeypatch)

    assert errors == []
    assert len(twilio.messages) == 1  # the cap is one a day, however many runs chase the person
    assert sorted(result["status"] for result in results.values()) == ["held", "sent"]
    held = OutboxMessage.objects.get(status=OutboxStatus.PENDING)
    assert held.not_before is not None
    assert OutboxMessage.objects.filter(status=OutboxStatus.SENT).count() == 1
    block = JournalEntry.objects.get(run_id=held.run_id, kind="policy_block")
    assert block.data["at_send"] is True and block.data["outbox_id"] == held.pk


@pytest.mark.django_db(transaction=True)
def test_two_runs_flushing_held_sends_to_the_same_contact_send_only_what_the_cap_allows(twilio, monkeypatch):
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5})
    first = s.real_run(plan)
    second = s.real_run(plan, organization=first.organization)
    s.sms_identity(first.organization, twilio)
    work = []
    for run in (first, second):
        episode = h.add_episode(run, "flush")
        OutboxMessage.objects.create(
            idem_key=outbox.idem_key(run_id=run.pk, episode_id=episode.pk, task_key="", tool="send_sms",
                                     recipient=s.VENDOR_NUMBER, ordinal=0),
            run=run, episode=episode, tool="send_sms", channel="sms", recipient=s.VENDOR_NUMBER,
            payload={"body": "Your W-9, please."}, created_at=timezone.now() - timedelta(hours=2),
            not_before=timezone.now() - timedelta(hours=1),
        )
        work.append((run, episode, h.claim(run)))

    # Both held rows are due and see room when the flush looks at them: only one may take the slot.
    results, errors = _race(work, step=lambda run, episode, epoch: tool_executor.flush_pending(
        h.context(run, episode, epoch=epoch)), wait_after=(tool_executor, "_still_held"), monkeypatch=monkeypatch)

    assert errors == []
    assert len(twilio.messages) == 1
    assert sorted(outcome.status for outcomes in results.values() for outcome in outcomes) == ["held", "sent"]
    assert OutboxMessage.objects.filter(status=OutboxStatus.SENT).count() == 1
    held = OutboxMessage.objects.get(status=OutboxStatus.PENDING)
    assert held.not_before > timezone.now() and held.attempts == 0
