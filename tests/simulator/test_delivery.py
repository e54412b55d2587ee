"""simulator.delivery: persona messages enter through the webhook intake and routing, as a provider's would."""

from __future__ import annotations

import pytest

from connectors import message_ids
from connectors.models import Channel, InboundMessage, InboundStatus
from runs.models import Episode, EpisodeKind, OutboxMessage
from simulator import sim_org
from tests.simulator.test_golden_cases import template_version
from tests.simulator.test_personas import case, simulate

pytestmark = pytest.mark.django_db

INVOICE_INPUTS = {"invoice_number": "INV-7", "amount": "$90.00", "due_date": "2030-01-15"}


def inbound_for(result) -> list[InboundMessage]:
    return list(InboundMessage.objects.filter(raw__simulated_run=result.run_id).order_by("pk"))


def test_an_email_reply_is_addressed_to_the_runs_reply_token_and_names_our_message_id():
    result = simulate(template_version("document-collector"),
                      case("direct", {"type": "replies_after", "days": 1, "text": "Which form exactly?"}))

    [message] = inbound_for(result)
    assert message.channel == Channel.SANDBOX and message.status == InboundStatus.MATCHED
    assert message_ids.parse_reply_address(message.to_address) == result.run_id
    assert message_ids.key_prefixes_in(message.headers["in_reply_to"])  # one of our Message-IDs
    episode = Episode.objects.get(run_id=result.run_id, kind=EpisodeKind.INBOUND)
    assert episode.dedupe_key == f"sandbox:{message.provider_id}"
    assert episode.payload["inbound_message_id"] == message.pk


def test_a_thread_reply_to_the_mailbox_is_found_by_in_reply_to_alone():
    result = simulate(template_version("document-collector"),
                      case("thread", {"type": "replies_after", "days": 1, "text": "Which form?", "via": "thread"}))

    [message] = inbound_for(result)
    mailbox = sim_org.sandbox_addresses(sim_org.SHARED_SLUG)["email"]
    assert message.to_address == mailbox and message_ids.parse_reply_address(mailbox) is None
    assert message.matched_run_id == result.run_id


def test_a_slack_reply_in_the_thread_carries_the_thread_of_the_message_answered():
    result = simulate(template_version("weekly-checkin"),
                      case("slack-thread", {"type": "replies_on_followup", "n": 0, "text": "Not yet.", "via": "thread"},
                           role="customer_lead", inputs={"project": "SSO"}))

    [message] = inbound_for(result)
    first_slack = Episode.objects.get(run_id=result.run_id, seq=1).outbox.get()
    assert message.headers["thread_ref"] == first_slack.provider_message_id
    assert message.matched_run_id == result.run_id


def test_a_direct_slack_message_is_routed_by_the_sender_like_a_dm():
    result = simulate(template_version("weekly-checkin"),
                      case("slack-dm", {"type": "replies_on_followup", "n": 0, "text": "Not yet."},
                           role="customer_lead", inputs={"project": "SSO"}))

    [message] = inbound_for(result)
    assert "thread_ref" not in message.headers and message.matched_run_id == result.run_id


def test_a_redelivered_message_is_stored_once_and_makes_one_episode():
    result = simulate(template_version("document-collector"),
                      case("twice", {"type": "replies_after", "days": 1, "text": "Which form exactly?"},
                           {"type": "redelivers", "message": 0, "after": 600}))

    assert result.passed, result.reasons
    assert len(inbound_for(result)) == 1
    assert Episode.objects.filter(run_id=result.run_id, kind=EpisodeKind.INBOUND).count() == 1
    assert result.metrics["redeliveries"] == 1
    assert any("deduped by the intake" in row["summary"] for row in result.timeline if row["type"] == "persona")


def test_a_call_report_is_routed_by_the_calls_status_callback_key():
    result = simulate(template_version("invoice-chaser"),
                      case("call", {"type": "answers_call", "transcripts": ["Who is this?", "Paying on 2030-02-20."]},
                           role="payer", inputs=INVOICE_INPUTS))

    [message] = inbound_for(result)
    assert message.kind == "call_report" and message.text == "Who is this?"
    call = Episode.objects.get(run_id=result.run_id, kind=EpisodeKind.CALL_REPORT)
    assert call.payload["transcript"] == "Who is this?"
    assert message.headers["idem_key"] == OutboxMessage.objects.get(run_id=result.run_id, tool="place_call").idem_key
