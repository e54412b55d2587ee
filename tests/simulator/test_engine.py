"""engine.run_case: a normal sim run driven through virtual weeks, never the wall clock, never a real provider.

That no case sleeps is checked on every golden case (tests/simulator/test_golden_cases.py).
"""

from __future__ import annotations

import json

import pytest

from connectors import identities
from connectors.base import SendResult
from connectors.email import EmailConnector
from connectors.models import SandboxMessage
from connectors.sandbox import SandboxConnector
from connectors.slack import SlackConnector
from connectors.sms import SmsConnector
from connectors.voice import VoiceConnector
from runs.models import OutboxMessage, OutboxStatus, Run
from runs.policy import window
from simulator import engine, scheduler, sim_org
from tests.simulator.test_golden_cases import template_version

pytestmark = pytest.mark.django_db

METRIC_KEYS = {"days_to_done", "messages", "messages_by_channel", "escalations", "escalation_kinds", "tokens",
               "cost_usd", "episodes", "final_status", "policy_violations", "quiet_hour_sends", "duplicate_sends",
               "approvals", "human_answers", "redeliveries"}


def golden(template: str, name: str) -> tuple:
    version = template_version(template)
    return version, next(c for c in version.compiled["evals"] if c["name"] == name)


def test_result_has_the_documented_shape_and_serializes():
    version, case = golden("document-collector", "replies-with-pdf-after-3-days")

    result = engine.run_case(version, case, organization=sim_org.organization_for(None))

    data = json.loads(json.dumps(result.as_dict()))
    assert data["name"] == case["name"] and data["passed"] is True and data["reasons"] == []
    assert set(data["metrics"]) == METRIC_KEYS
    assert data["metrics"]["messages_by_channel"] == {"email": 2}
    run = Run.objects.get(pk=result.run_id)
    assert run.sim and run.version_id == version.pk
    days = [row["day"] for row in data["timeline"]]
    assert days == sorted(days) and days[0] == 0
    assert {"day", "channel", "direction", "summary"} <= set(data["timeline"][0])
    # Addresses carry a per-run token, so the transcript names contacts by role.
    assert any(row["summary"].startswith("→ vendor <Dana Whitfield>") for row in data["timeline"])


def test_a_failed_expectation_gives_one_reason_each():
    version, case = golden("document-collector", "silent-vendor-escalates")
    case = {**case, "expect": {"tasks_done_by_day": 7, "max_messages": 2, "escalated": False}}

    result = engine.run_case(version, case, organization=sim_org.organization_for(None))

    assert not result.passed
    assert [reason.split(":")[0] for reason in result.reasons] == ["tasks_done_by_day", "max_messages", "escalated"]
    assert "collect_w9 was not done by day 7 (still open)" in result.reasons[0]


def test_same_seed_tells_the_same_story():
    version, case = golden("weekly-checkin", "live-in-week-two")
    org = sim_org.organization_for(None)

    first = engine.run_case(version, case, organization=org, seed=7)
    second = engine.run_case(version, case, organization=org, seed=7)

    def story(result):
        return [(row["type"], row["kind"], row["channel"], row["direction"], row["summary"]) for row in result.timeline]

    assert story(first) == story(second)
    # Times match up to the runtime's per-run wake offset (runs.policy.run_offset, keyed by run id).
    spread = window.OFFSET_SPREAD_S / 86400
    assert all(abs(a["day"] - b["day"]) <= spread for a, b in zip(first.timeline, second.timeline, strict=True))
    assert first.metrics == second.metrics


def test_progress_runs_from_zero_to_one_over_the_horizon():
    version, case = golden("document-collector", "silent-vendor-escalates")
    seen: list[float] = []

    engine.run_case(version, case, organization=sim_org.organization_for(None), progress=seen.append)

    assert seen and seen == sorted(seen) and 0 <= seen[0] and seen[-1] == 1.0
    assert any(0.4 < value < 0.6 for value in seen)  # the day-21 deadline of a 42-day horizon


def test_weeks_caps_the_horizon():
    version, case = golden("document-collector", "silent-vendor-escalates")

    result = engine.run_case(version, case, organization=sim_org.organization_for(None), weeks=1)

    # Day 0 and day 3 emails; the day-7 SMS lies past the one-week horizon.
    assert result.metrics["messages"] == 2
    assert result.metrics["final_status"] == "waiting"


@pytest.mark.parametrize(("template", "name"), [("invoice-chaser", "silent-payer-escalates"),
                                                ("weekly-checkin", "silent-lead-escalates")])
def test_simulation_never_calls_a_real_connector(monkeypatch, template, name):
    for connector in (EmailConnector, SmsConnector, VoiceConnector, SlackConnector):
        monkeypatch.setattr(connector, "send", lambda self, message: pytest.fail(f"real send: {message.channel}"))
    org = sim_org.organization_for(None)
    # Even an organization with a real mailbox sends a simulation's messages to the sandbox.
    identities.create_identity(org, channel="email", address="ap@real.example", display_name="AP", sandbox=False,
                               secret_values={})
    version, case = golden(template, name)

    result = engine.run_case(version, case, organization=org)

    assert result.passed, result.reasons
    keys = set(OutboxMessage.objects.filter(run_id=result.run_id, status=OutboxStatus.SENT)
               .values_list("idem_key", flat=True))
    assert keys and keys == set(SandboxMessage.objects.filter(idem_key__in=keys).values_list("idem_key", flat=True))


def test_a_send_that_did_not_reach_the_sandbox_stops_the_simulation(monkeypatch):
    def provider_send(self, message):
        return SendResult(provider_message_id="SM0123456789", accepted_at=message.sent_at)

    monkeypatch.setattr(SandboxConnector, "send", provider_send)
    version, case = golden("document-collector", "silent-vendor-escalates")

    with pytest.raises(scheduler.RealSendError):
        engine.run_case(version, case, organization=sim_org.organization_for(None))
