"""Per-contact caps hold when two runs write to the same person at the same instant (real threads)."""

import threading

import pytest
from django.db import connection

from runs import outbox
from runs.models import OutboxMessage, OutboxStatus
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


@pytest.mark.django_db(transaction=True)
def test_two_runs_racing_to_the_same_contact_send_only_what_the_cap_allows(twilio, monkeypatch):
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5})
    first = s.real_run(plan)
    second = s.real_run(plan, organization=first.organization)
    s.sms_identity(first.organization, twilio)
    work = [(run, h.add_episode(run, "start"), h.claim(run)) for run in (first, second)]

    # Both runs pass the decision-time cap check before either records its send: the race the lock closes.
    both_decided = threading.Barrier(2, timeout=30)
    open_row = outbox.open_row

    def open_row_then_wait(*args, **kwargs):
        row = open_row(*args, **kwargs)
        both_decided.wait()
        return row

    monkeypatch.setattr(outbox, "open_row", open_row_then_wait)
    results, errors = {}, []

    def send(run, episode, epoch):
        try:
            results[run.pk] = s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)[0]
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=item) for item in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert len(twilio.messages) == 1  # the cap is one a day, however many runs chase the person
    assert sorted(result["status"] for result in results.values()) == ["held", "sent"]
    held = OutboxMessage.objects.get(status=OutboxStatus.PENDING)
    assert held.not_before is not None
    assert OutboxMessage.objects.filter(status=OutboxStatus.SENT).count() == 1
