"""Fault windows: the model and the sending provider fail inside them as real ones do, and only inside them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from connectors import outages
from connectors.base import OutboundMessage
from connectors.errors import ConnectorError
from connectors.models import Identity, SandboxMessage
from connectors.sandbox import SandboxConnector
from runs.llm import providers
from runs.llm.base import ChatRequest, ModelError
from runs.models import Escalation, EscalationKind, JournalEntry, JournalKind, OutboxMessage, OutboxStatus
from simulator import faults
from tests.factories import OrganizationFactory
from tests.simulator.test_golden_cases import template_version
from tests.simulator.test_personas import case, simulate

pytestmark = pytest.mark.django_db

NEW_YORK = ZoneInfo("America/New_York")
START = datetime(2029, 12, 31, 9, 0, tzinfo=NEW_YORK)


def test_windows_are_calendar_days_in_the_organizations_zone():
    [by_days, by_hours] = faults.windows_for(
        [{"kind": "model_429", "from_day": 3, "to_day": 4},
         {"kind": "provider_unreachable", "from_day": 1, "at": "10:00", "lasts": 7200, "channel": "email"}],
        start=START, zone=NEW_YORK)

    assert (by_days.starts, by_days.ends) == (datetime(2030, 1, 3, tzinfo=NEW_YORK),
                                              datetime(2030, 1, 5, tzinfo=NEW_YORK))
    assert (by_hours.starts, by_hours.ends) == (datetime(2030, 1, 1, 10, tzinfo=NEW_YORK),
                                                datetime(2030, 1, 1, 12, tzinfo=NEW_YORK))
    assert by_hours.covers(datetime(2030, 1, 1, 11, tzinfo=NEW_YORK), channel="email")
    assert not by_hours.covers(datetime(2030, 1, 1, 11, tzinfo=NEW_YORK), channel="sms")
    assert not by_hours.covers(datetime(2030, 1, 1, 12, tzinfo=NEW_YORK), channel="email")


def test_a_model_call_inside_the_window_is_a_retryable_429_and_outside_it_is_answered():
    window = outages.Window(kind="model_429", starts=START, ends=START + timedelta(hours=3))
    request = ChatRequest(model="scripted", messages=[{"role": "user", "content": "hi"}])
    with faults.armed(77, [window]):
        failing = providers.provider_for_run({}, run_id=77, at=START + timedelta(hours=1))
        with pytest.raises(ModelError) as raised:
            failing.complete(request)
        later = providers.provider_for_run({}, run_id=77, at=START + timedelta(hours=3))
    assert raised.value.retryable and raised.value.retry_after and "429" in raised.value.message
    assert later is providers.provider_for({})  # outside the window: the plain shared provider
    assert providers.provider_for_run({}, run_id=77, at=START + timedelta(hours=1)) is providers.provider_for({})


def _message(key: str, *, at: datetime) -> OutboundMessage:
    return OutboundMessage(idem_key=key, channel="email", to="a@example.com", body="hi", sent_at=at,
                           metadata={"run_id": 78})


def test_the_sandbox_provider_fails_like_a_real_one_in_each_kind_of_outage(db):
    connector = SandboxConnector(Identity(organization=OrganizationFactory(), channel="email", address="x",
                                          sandbox=True), secrets={})
    at = START + timedelta(minutes=5)
    kinds = {}
    for kind in outages.PROVIDER_KINDS:
        with faults.armed(78, [outages.Window(kind=kind, starts=START, ends=START + timedelta(hours=1))]):
            with pytest.raises(ConnectorError) as raised:
                connector.send(_message(f"key-{kind}", at=at))
        kinds[kind] = (raised.value.permanent, raised.value.outcome_unknown,
                       SandboxMessage.objects.filter(idem_key=f"key-{kind}").exists())
    # Refused (nothing taken) or unknown (taken, the answer lost: only a lookup tells); never permanent.
    assert kinds == {"provider_unreachable": (False, False, False), "provider_429": (False, False, False),
                     "provider_timeout": (False, True, True)}
    assert connector.send(_message("key-after", at=START + timedelta(hours=2))).provider_message_id


def test_a_provider_outage_delays_the_send_and_never_duplicates_it():
    result = simulate(template_version("document-collector"),
                      {**case("outage", {"type": "silent"}),
                       "faults": [{"kind": "provider_unreachable", "from_day": 0, "at": "08:00", "lasts": 7200,
                                   "channel": "email"}]})

    first = OutboxMessage.objects.filter(run_id=result.run_id, status=OutboxStatus.SENT).order_by("sent_at").first()
    assert first.sent_at >= datetime(2029, 12, 31, 10, 0, tzinfo=NEW_YORK) and first.attempts >= 2
    assert result.metrics["duplicate_sends"] == 0 and result.metrics["messages"] == 4


def test_a_provider_timeout_is_looked_up_and_adopted_not_sent_twice():
    result = simulate(template_version("document-collector"),
                      {**case("timeout", {"type": "silent"}),
                       "faults": [{"kind": "provider_timeout", "from_day": 0, "at": "08:00", "lasts": 3600}]})

    sent = OutboxMessage.objects.filter(run_id=result.run_id, status=OutboxStatus.SENT)
    assert SandboxMessage.objects.filter(idem_key__in=sent.values("idem_key")).count() == sent.count() == 4
    assert result.metrics["duplicate_sends"] == 0


def test_a_model_outage_reaches_the_run_as_a_model_failure_and_nothing_is_sent(settings):
    # The whole run in an outage: however the runtime retries, nothing may go out and a human hears of it.
    # Retries capped at six hours, not one: the week is ~35 failed episodes instead of ~175 (the cadence is
    # not the subject here; test_a_model_outage_backs_off_on_the_runs_clock_and_never_sleeps is about it).
    settings.LUCIA_MODEL_RETRY_MAX_SECONDS = 6 * 3600
    result = simulate(template_version("document-collector"),
                      {**case("down", {"type": "silent"}), "weeks": 1,
                       "faults": [{"kind": "model_5xx", "from_day": 0, "to_day": 7}]})

    assert result.metrics["messages"] == 0
    stuck = Escalation.objects.filter(run_id=result.run_id, kind=EscalationKind.STUCK)
    assert stuck.exists() and "503" in stuck.first().prompt
    assert not OutboxMessage.objects.filter(run_id=result.run_id).exists()


def test_a_model_outage_backs_off_on_the_runs_clock_and_never_sleeps(monkeypatch):
    # A simulated week must not cost wall-clock time for the model's retries: any real wait fails the case.
    slept = []

    def forbidden_sleep(seconds: float) -> None:
        slept.append(seconds)
        raise AssertionError(f"slept {seconds}s of wall-clock time during a simulated model outage")

    monkeypatch.setattr(time, "sleep", forbidden_sleep)
    result = simulate(template_version("document-collector"),
                      {**case("short-outage", {"type": "silent"}), "weeks": 1,
                       "faults": [{"kind": "model_429", "from_day": 0, "at": "08:00", "lasts": 7200}]})

    assert slept == []
    postponed = list(JournalEntry.objects.filter(run_id=result.run_id, kind=JournalKind.NOTE,
                                                 data__model_outage=True).order_by("at"))
    waits = [datetime.fromisoformat(note.data["retry_at"]) - note.at for note in postponed]
    # Each retry is scheduled on the run's clock, a minute and more apart, and the next attempt happens then.
    assert len(waits) >= 3 and all(wait >= timedelta(seconds=30) for wait in waits)
    assert [note.at for note in postponed[1:]] == [datetime.fromisoformat(note.data["retry_at"])
                                                   for note in postponed[:-1]]
    first = OutboxMessage.objects.filter(run_id=result.run_id, status=OutboxStatus.SENT).order_by("sent_at").first()
    assert first.sent_at >= datetime(2029, 12, 31, 10, 0, tzinfo=NEW_YORK)  # after the window, not within it
    assert not Escalation.objects.filter(run_id=result.run_id, kind=EscalationKind.STUCK).exists()
