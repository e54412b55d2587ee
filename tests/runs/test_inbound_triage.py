"""A person settles an unmatched inbound message: attached to a run as routing would have, or dismissed."""

import pytest
from django.contrib.auth import get_user_model

from connectors.models import InboundMessage
from runs import answers, inbound_routing, inbound_triage
from runs.models import Episode, Escalation, EscalationStatus, Run
from tests.factories import ContactFactory, OrganizationFactory, RunFactory
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

DANA = "+12125550123"


@pytest.fixture
def sam():
    return get_user_model().objects.create_user("sam", password="x" * 16, is_staff=True)


def unmatched(organization, *, provider_id: str = "SM1", text: str = "Here is the W-9") -> InboundMessage:
    message = InboundMessage.objects.create(channel="sms", provider_id=provider_id, from_address="+19995550000",
                                            to_address="+15005550006", text=text)
    assert inbound_routing.deliver(message, organization=organization) is None  # no run took it: triage
    message.refresh_from_db()
    return message


def open_run(organization, **fields) -> Run:
    run = RunFactory(organization=organization, **fields)
    ContactFactory(run=run, phone=DANA)
    return run


def test_an_attached_message_becomes_the_runs_inbound_episode_as_routing_would_make_it(sam):
    organization = OrganizationFactory()
    message = unmatched(organization)
    run = open_run(organization)

    episode = inbound_triage.attach(message, run, by_user=sam, note="Dana's new phone")

    assert (episode.run_id, episode.kind, episode.dedupe_key) == (run.pk, "inbound", "sms:SM1")
    assert episode.payload == inbound_routing.episode_payload(message)
    assert queued_run_ids() == [run.pk]
    message.refresh_from_db()
    assert (message.status, message.matched_run_id, message.triaged_by, message.triage_note) == (
        "matched", run.pk, sam, "Dana's new phone")
    assert message.triaged_at is not None
    triage = Escalation.objects.get(inbound_message_id=message.pk)
    assert (triage.status, triage.answered_by, triage.answer) == (
        EscalationStatus.ANSWERED, sam, f"Attached to run {run.pk}. Dana's new phone")


def test_attach_refuses_another_organizations_run_an_ended_run_and_a_settled_message(sam):
    organization = OrganizationFactory()
    message = unmatched(organization)

    for run in (open_run(OrganizationFactory()), open_run(organization, status="completed"),
                open_run(organization, sim=True)):
        with pytest.raises(inbound_triage.TriageRefused, match="open run of the message's organization"):
            inbound_triage.attach(message, run, by_user=sam)
    inbound_triage.attach(message, open_run(organization), by_user=sam)
    with pytest.raises(inbound_triage.TriageRefused, match="already matched"):
        inbound_triage.attach(message, open_run(organization), by_user=sam)
    assert Episode.objects.count() == 1


def test_dismiss_needs_a_reason_and_keeps_who_when_and_why(sam):
    message = unmatched(OrganizationFactory())

    with pytest.raises(inbound_triage.TriageRefused, match="Say why"):
        inbound_triage.dismiss(message, by_user=sam, note="  ")
    inbound_triage.dismiss(message, by_user=sam, note="spam")

    message.refresh_from_db()
    assert (message.status, message.triaged_by, message.triage_note) == ("dismissed", sam, "spam")
    assert Escalation.objects.get(inbound_message_id=message.pk).status == EscalationStatus.ANSWERED
    with pytest.raises(inbound_triage.TriageRefused, match="already dismissed"):
        inbound_triage.dismiss(message, by_user=sam, note="again")


def test_answering_the_triage_escalation_settles_the_message_too(sam):
    organization = OrganizationFactory()
    first, second = unmatched(organization, provider_id="SM1"), unmatched(organization, provider_id="SM2")
    run = open_run(organization)
    escalation = {m.pk: Escalation.objects.get(inbound_message_id=m.pk) for m in (first, second)}

    with pytest.raises(answers.AnswerRefused, match="data.run_id"):
        answers.answer(escalation[first.pk], option="attach_to_run", by_user=sam, via="admin")
    answers.answer(escalation[first.pk], option="attach_to_run", data={"run_id": run.pk}, by_user=sam, via="api")
    answers.answer(escalation[second.pk], option="dismiss", text="a wrong number", by_user=sam, via="admin")

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.matched_run_id) == ("matched", run.pk)
    assert Episode.objects.get(run=run).payload["inbound_message_id"] == first.pk
    assert (second.status, second.triage_note, second.triaged_by) == ("dismissed", "a wrong number", sam)
