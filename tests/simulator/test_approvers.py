"""simulator.approvers: an eval case approves, edits or rejects drafts, and the scorecard counts the answers."""

from __future__ import annotations

import pytest

from agents import versions
from connectors.models import SandboxMessage
from runs.models import Escalation, EscalationKind, JournalEntry, JournalKind, OutboxMessage, OutboxStatus, Run
from simulator import engine, report, scorecards, sim_org
from tests.factories import AgentFactory
from tests.simulator.conftest import COLLECTOR_SOURCE

pytestmark = pytest.mark.django_db

EDITED = "Hi Dana, this is Sam from accounts payable: could you send us your signed W-9 this week?"
GUIDANCE = "Do not send a second email so soon; wait for the SMS step."


def _approval_version():
    source = COLLECTOR_SOURCE.replace("\nevals:", "\napprovals: {outbound: all}\n\nevals:", 1)
    version = versions.create_draft(AgentFactory(slug="document-collector"), source=source)
    assert version.is_valid, version.validation_errors
    assert version.compiled["approvals"] == {"outbound": "all", "channels": {}}
    return version


def test_a_case_edits_rejects_and_approves_drafts_in_order_and_the_scorecard_counts_them():
    version = _approval_version()
    silent = next(c for c in version.compiled["evals"] if c["name"] == "silent-vendor-escalates")
    case = {**silent, "approvals": [{"action": "edit", "text": EDITED}, {"action": "reject", "text": GUIDANCE}],
            "expect": {"min_messages": 3, "max_messages": 3, "escalated": True}}

    result = engine.run_case(version, case, organization=sim_org.organization_for(None))

    assert result.passed, result.reasons
    # Draft 1 edited, draft 2 rejected, drafts 3 and 4 approved (after the script, drafts are approved).
    assert result.metrics["approvals"] == {"approved": 2, "edited": 1, "rejected": 1}
    # Approvals are counted apart from the escalations the agent raised (the spent ladder's one).
    assert (result.metrics["escalations"], result.metrics["escalation_kinds"]) == (1, [EscalationKind.STUCK])
    run = Run.objects.get(pk=result.run_id)
    rows = list(OutboxMessage.objects.filter(run=run).order_by("id"))
    assert [row.status for row in rows] == [OutboxStatus.SENT, OutboxStatus.REJECTED, OutboxStatus.SENT,
                                           OutboxStatus.SENT]
    assert [row.channel for row in rows] == ["email", "email", "sms", "email"]
    first = SandboxMessage.objects.get(idem_key=rows[0].idem_key)
    assert first.payload["body"] == EDITED
    assert not SandboxMessage.objects.filter(idem_key=rows[1].idem_key).exists()
    decisions = JournalEntry.objects.filter(run=run, kind=JournalKind.APPROVAL).order_by("seq")
    assert [e.data["decision"] for e in decisions] == ["edited", "rejected", "approved", "approved"]
    assert {e.data["via"] for e in decisions} == {"simulator"}
    kinds = list(Escalation.objects.filter(run=run).order_by("id").values_list("kind", flat=True))
    assert kinds == [EscalationKind.APPROVAL] * 4 + [EscalationKind.STUCK]

    card = scorecards.build([{**result.as_dict(), "kind": "golden"}])
    assert card["metrics"]["approvals"] == {"approved": 2, "edited": 1, "rejected": 1}
    line = report.verdict({"agent": "document-collector", "version": 1, **card})
    assert line.endswith("(1/1 cases); drafts 2 approved, 1 edited, 1 rejected")


def test_an_approval_script_step_needs_text_for_edit_and_reject():
    source = COLLECTOR_SOURCE.replace(
        "  - name: replies-with-pdf-after-3-days\n",
        "  - name: replies-with-pdf-after-3-days\n    approvals: [{action: approve}, {action: reject}]\n", 1)
    version = versions.create_draft(AgentFactory(slug="document-collector"), source=source)
    assert not version.is_valid
    [error] = version.validation_errors
    assert error["path"] == "evals[0].approvals[1]"
    assert "reject needs a text" in error["message"] and "guidance" in error["hint"]


def test_the_invoice_chasers_golden_case_edits_its_first_reminder_and_later_ones_need_no_approval():
    from tests.simulator.test_golden_cases import template_version

    version = template_version("invoice-chaser")
    assert version.compiled["approvals"]["outbound"] == "first_message"
    case = next(c for c in version.compiled["evals"] if c["name"] == "first-reminder-edited-before-sending")

    result = engine.run_case(version, case, organization=sim_org.organization_for(None))

    assert result.passed, result.reasons
    assert result.metrics["approvals"] == {"edited": 1}
    first, *later = OutboxMessage.objects.filter(run_id=result.run_id).order_by("id")
    assert SandboxMessage.objects.get(idem_key=first.idem_key).payload["body"] == case["approvals"][0]["text"].strip()
    assert later and all(row.status == OutboxStatus.SENT for row in later)  # the thanks went out unasked
