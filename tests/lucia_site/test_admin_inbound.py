"""The Studio's inbound and compliance pages: attach and dismiss unmatched messages, lift suppressions, read
delivery events; each scoped to the user's organizations and checked against their role."""

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from agents import roles
from connectors.models import DeliveryEvent, InboundMessage, Suppression, SuppressionLift
from runs import inbound_routing
from runs.models import Episode, Escalation, EscalationStatus, OutboxMessage
from tests.factories import ContactFactory, EpisodeFactory, OrganizationFactory, RunFactory
from tests.studio_world import studio_user

pytestmark = pytest.mark.django_db

SENDER = "+12125550123"


@pytest.fixture
def acme():
    return OrganizationFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def globex():
    return OrganizationFactory(slug="globex", name="Globex Corp")


@pytest.fixture
def as_role(client, acme):
    def log_in(role: str):
        client.force_login(studio_user(role.lower(), role=role, organizations=[acme]))
        return client
    return log_in


def unmatched(organization, *, provider_id: str = "SM1") -> InboundMessage:
    message = InboundMessage.objects.create(channel="sms", provider_id=provider_id, from_address=SENDER,
                                            to_address="+15005550006", text="Here is the W-9")
    inbound_routing.triage(message, organization=organization, reason="no_run")
    return message


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def attach_url(message) -> str:
    return reverse("admin:connectors_inboundmessage_attach", args=[message.pk])


def test_support_attaches_a_message_to_a_suggested_run(as_role, acme):
    message = unmatched(acme)
    newer = RunFactory(organization=acme)
    sender_run = RunFactory(organization=acme)
    ContactFactory(run=sender_run, phone=SENDER)
    RunFactory(organization=acme, status="completed")
    client = as_role(roles.SUPPORT)

    page = client.get(reverse("admin:connectors_inboundmessage_change", args=[message.pk])).content.decode()
    assert 'id="studio-attach"' in page and 'name="_save"' not in page
    form = client.get(attach_url(message))
    assert [run.pk for run in form.context["suggested"]] == [sender_run.pk, newer.pk]  # the sender's run first

    response = client.post(attach_url(message), {"_run": sender_run.pk, "note": "Dana's number"}, follow=True)

    assert said(response) == [f"Attached the message to run {sender_run.pk}: it is that run's inbound episode now."]
    episode = Episode.objects.get(run=sender_run)
    assert (episode.kind, episode.payload["inbound_message_id"]) == ("inbound", message.pk)
    message.refresh_from_db()
    assert (message.status, message.triaged_by.username, message.triage_note) == ("matched", "support",
                                                                                   "Dana's number")
    assert Escalation.objects.get(inbound_message_id=message.pk).status == EscalationStatus.ANSWERED


def test_attach_refuses_a_run_of_another_organization_and_says_what_to_do(as_role, acme, globex):
    message = unmatched(acme)
    theirs = RunFactory(organization=globex)

    response = as_role(roles.SUPPORT).post(attach_url(message), {"run": theirs.pk})

    assert response.context["form"].errors["run"] == [
        "Not an open run of this message's organization: choose one listed here."]
    assert not Episode.objects.exists()
    assert InboundMessage.objects.get(pk=message.pk).status == "unmatched"


def test_triage_pages_are_refused_to_a_viewer_and_hidden_from_other_organizations(as_role, acme, globex):
    ours, theirs = unmatched(acme, provider_id="SM1"), unmatched(globex, provider_id="SM2")
    dismiss = reverse("admin:connectors_inboundmessage_dismiss", args=[ours.pk])

    viewer = as_role(roles.VIEWER)
    listing = viewer.get(reverse("admin:connectors_inboundmessage_changelist"))
    assert listing.context["action_form"] is None and "data-attach" not in listing.content.decode()
    assert 'id="studio-attach"' not in viewer.get(
        reverse("admin:connectors_inboundmessage_change", args=[ours.pk])).content.decode()
    assert viewer.get(attach_url(ours)).status_code == 403
    assert viewer.post(dismiss, {"reason": "spam"}).status_code == 403

    support = as_role(roles.SUPPORT)
    assert support.get(attach_url(theirs)).status_code == 404
    assert support.get(reverse("admin:connectors_inboundmessage_attach", args=[999_999])).status_code == 404
    assert {m.pk for m in support.get(reverse("admin:connectors_inboundmessage_changelist")
                                      ).context["cl"].result_list} == {ours.pk}
    assert InboundMessage.objects.get(pk=ours.pk).status == "unmatched"


def test_bulk_dismiss_asks_why_and_records_it(as_role, acme):
    first, second = unmatched(acme, provider_id="SM1"), unmatched(acme, provider_id="SM2")
    changelist = reverse("admin:connectors_inboundmessage_changelist")
    selection = {"action": "dismiss_selected", "_selected_action": [first.pk, second.pk]}
    client = as_role(roles.SUPPORT)

    asked = client.post(changelist, {**selection, "index": 0})
    assert asked.status_code == 200 and 'id="studio-reason"' in asked.content.decode()
    refused = client.post(changelist, {**selection, "reason": ""})
    assert "This field is required" in refused.content.decode()
    assert InboundMessage.objects.filter(status="dismissed").count() == 0

    done = client.post(changelist, {**selection, "reason": "spam campaign"}, follow=True)

    assert len(said(done)) == 1 and said(done)[0].startswith("Dismissed: ")
    assert set(InboundMessage.objects.values_list("status", "triage_note")) == {("dismissed", "spam campaign")}
    assert not Escalation.objects.filter(status=EscalationStatus.OPEN).exists()


def test_support_lifts_a_suppression_with_a_reason_and_a_builder_cannot(as_role, acme, globex):
    ours = Suppression.objects.create(organization=acme, channel="sms", address=SENDER, reason="stop")
    theirs = Suppression.objects.create(organization=globex, channel="sms", address=SENDER, reason="stop")
    lift = reverse("admin:connectors_suppression_lift", args=[ours.pk])

    builder = as_role(roles.BUILDER)
    assert "data-lift" not in builder.get(reverse("admin:connectors_suppression_changelist")).content.decode()
    assert builder.post(lift, {"reason": "asked"}).status_code == 403

    support = as_role(roles.SUPPORT)
    assert support.get(reverse("admin:connectors_suppression_lift", args=[theirs.pk])).status_code == 404
    assert "This field is required" in support.post(lift, {"reason": " "}).content.decode()
    response = support.post(lift, {"reason": "Called us: wants the reminders again"}, follow=True)

    assert said(response) == [f"Lifted: {ours}."]
    assert list(Suppression.objects.all()) == [theirs]
    record = SuppressionLift.objects.get()
    assert (record.organization, record.address, record.lifted_by.username, record.note) == (
        acme, SENDER, "support", "Called us: wants the reminders again")
    assert record.pk in {row.pk for row in support.get(
        reverse("admin:connectors_suppressionlift_changelist")).context["cl"].result_list}


def test_delivery_events_belong_to_the_organization_of_their_send(as_role, client, acme):
    run = RunFactory(organization=acme)
    send = OutboxMessage.objects.create(idem_key="a" * 64, run=run, episode=EpisodeFactory(run=run), tool="send_sms",
                                        channel="sms", recipient=SENDER, status="sent", provider_message_id="SMacme",
                                        created_at=timezone.now())
    by_key = DeliveryEvent.objects.create(channel="sms", idem_key=send.idem_key, event_type="delivered")
    by_id = DeliveryEvent.objects.create(channel="sms", provider_message_id="SMacme", event_type="undelivered")
    stranger = DeliveryEvent.objects.create(channel="sms", provider_message_id="SMelse", event_type="delivered")
    changelist = reverse("admin:connectors_deliveryevent_changelist")

    support = as_role(roles.SUPPORT)
    listing = support.get(changelist)
    assert {event.pk for event in listing.context["cl"].result_list} == {by_key.pk, by_id.pk}
    assert reverse("admin:runs_run_timeline", args=[run.pk]) in listing.content.decode()
    filtered = support.get(changelist, {"event_type": "undelivered"}).context["cl"].result_list
    assert [event.pk for event in filtered] == [by_id.pk]
    assert support.get(reverse("admin:connectors_deliveryevent_change", args=[stranger.pk])).status_code == 302
    assert 'name="_save"' not in support.get(
        reverse("admin:connectors_deliveryevent_change", args=[by_key.pk])).content.decode()

    client.force_login(studio_user("root", superuser=True))
    assert client.get(changelist).context["cl"].result_count == 3
