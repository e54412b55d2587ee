"""Contact memory: what is written to Contact.history, and the runtime honouring it (channel, absence, opt-out)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runs import contact_memory, worker
from runs.models import Contact, Episode, JournalEntry, OutboxMessage
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db
HUMAN = {"user_id": 1, "key_id": None, "via": "admin"}


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


def _vendor(run) -> Contact:
    return Contact.objects.get(run=run, role="vendor")


def test_an_address_change_keeps_the_old_address_in_the_history():
    run = h.make_run()
    contact = _vendor(run)

    contact_memory.change_address(contact, channel="sms", address="+1 (555) 555-0199", at=h.BUSINESS_HOURS,
                                  by=HUMAN, why="new mobile")

    contact = _vendor(run)
    assert contact.phone == "+15555550199"
    assert contact.history == [{"kind": "address", "at": h.BUSINESS_HOURS.isoformat(), "by": HUMAN,
                                "why": "new mobile", "channel": "sms", "old": "+1 555 555 0101",
                                "new": "+15555550199"}]
    with pytest.raises(ValueError, match="not a valid"):
        contact_memory.change_address(contact, channel="email", address="nobody", at=h.BUSINESS_HOURS, by=HUMAN,
                                      why="typo")


@pytest.mark.parametrize(("text", "rule", "channel"), [
    ("Could you text me instead? I never read email.", "text_instead", "sms"),
    ("Please email me instead of texting.", "email_instead", "email"),
])
def test_a_contact_asking_for_another_channel_sets_the_preference_without_a_human(text, rule, channel):
    run = h.make_run()
    h.inbound(run, text)

    worker.advance_run(run.pk)

    [entry] = _vendor(run).history
    assert (entry["kind"], entry["channel"], entry["by"]) == ("preference", channel,
                                                              {"contact": "vendor", "rule": rule})
    note = JournalEntry.objects.get(run=run, kind="note", data__contact_memory="preference")
    assert (note.data["rule"], note.data["channel"]) == (rule, channel)
    # The ladder's next step (email for this plan's step 0) moves to what they asked for.
    followup = Episode.objects.filter(run=run, kind="followup", status="queued").first()
    assert followup is not None and followup.payload["channel"] == channel


def test_nothing_is_learned_from_a_reply_that_asks_for_no_channel():
    run = h.make_run()
    h.inbound(run, "I will send it tomorrow.")
    worker.advance_run(run.pk)
    # A promise with a date is remembered (runs.promises); no channel preference is.
    assert [entry["kind"] for entry in _vendor(run).history] == ["promise"]


def test_no_outreach_while_the_contact_is_away():
    run = h.make_run()
    back = h.BUSINESS_HOURS + timedelta(days=9)
    contact_memory.set_absence(_vendor(run), until=back, at=h.BUSINESS_HOURS, by=HUMAN, why="out until the 14th")

    result, _ = s.dispatch(run, h.add_episode(run, "followup"), "send_email", s.EMAIL)

    assert result["status"] == "held"  # held in the outbox until they are back
    assert OutboxMessage.objects.get(run=run).not_before >= back
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="contact_absent").exists()


def test_a_channel_the_contact_opted_out_of_is_never_used():
    run = h.make_run()
    contact_memory.opt_out(_vendor(run), channels=["email"], at=h.BUSINESS_HOURS, by=HUMAN, why="asked by phone")

    result, _ = s.dispatch(run, h.add_episode(run, "followup"), "send_email", s.EMAIL)

    assert result["status"] == "blocked"
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="contact_opted_out").exists()
