import threading

import pytest
from django.db import connection
from django.test import Client

from connectors import suppressions
from connectors.models import DeliveryEvent, InboundMessage, Suppression
from runs.models import Episode, OutboxMessage
from tests.connectors.conftest import ACCOUNT_SID, AUTH_TOKEN, OUR_NUMBER, load_payload
from tests.factories import OrganizationFactory
from tests.lucia_site.webhooks.support import identity, inbound_episodes, post_twilio, run_with_contact, sent
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

DANA = "+12125550123"
OTHER_NUMBER = "+15005550007"
KEY = "3c" * 32
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'


@pytest.fixture
def acme():
    organization = OrganizationFactory(name="Acme")
    identity(organization, "sms", OUR_NUMBER, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN)
    identity(organization, "voice", OUR_NUMBER, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN)
    return organization


@pytest.fixture
def globex():
    """Another organization on its own number, with a run chasing the same person."""
    organization = OrganizationFactory(name="Globex")
    identity(organization, "sms", OTHER_NUMBER, account_sid=ACCOUNT_SID, auth_token="globex-token")
    return organization


def _nothing_stored() -> bool:
    return not (InboundMessage.objects.exists() or DeliveryEvent.objects.exists() or Suppression.objects.exists()
                or Episode.objects.filter(kind__in=("inbound", "call_report")).exists())


def test_an_sms_reply_reaches_the_newest_open_run_of_the_number_owner_and_enqueues_it(client, acme, globex):
    older = run_with_contact(acme, phone=DANA)
    newest = run_with_contact(acme, phone="+1 (212) 555-0123")
    run_with_contact(globex, phone=DANA)

    response = post_twilio(client, "/hooks/twilio/sms/", load_payload("twilio/sms_inbound_mms.json"))

    assert response.status_code == 200 and response.content.decode() == EMPTY_TWIML
    [episode] = Episode.objects.filter(kind="inbound")
    assert episode.run_id == newest.pk and not inbound_episodes(older)
    assert episode.payload["text"] == "Here is the signed W-9, sorry for the delay"
    assert episode.payload["channel"] == "sms" and episode.payload["from"] == DANA
    assert episode.payload["attachments"][0]["content_type"] == "application/pdf"
    message = InboundMessage.objects.get()
    assert (message.status, message.matched_run_id, message.organization_id) == ("matched", newest.pk, acme.pk)
    assert episode.payload["inbound_message_id"] == message.pk
    assert queued_run_ids() == [newest.pk]


def test_a_repeated_delivery_is_refused_and_makes_no_second_episode(client, acme):
    """Twilio signs no time, so its signature is the same for the same request: a repeat is a replay."""
    run = run_with_contact(acme, phone=DANA)
    params = load_payload("twilio/sms_inbound_mms.json")

    first = post_twilio(client, "/hooks/twilio/sms/", params)
    again = post_twilio(client, "/hooks/twilio/sms/", params)

    assert (first.status_code, again.status_code) == (200, 403)
    assert len(inbound_episodes(run)) == 1 and InboundMessage.objects.count() == 1
    assert queued_run_ids() == [run.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_deliveries_make_one_episode(acme):
    run = run_with_contact(acme, phone=DANA)
    params = load_payload("twilio/sms_inbound_mms.json")
    barrier = threading.Barrier(4)
    statuses: list[int] = []

    def deliver() -> None:
        try:
            barrier.wait()
            statuses.append(post_twilio(Client(), "/hooks/twilio/sms/", params).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # The replay table decides: one delivery wins, the others wait for it and are refused.
    assert sorted(statuses) == [200, 403, 403, 403]
    assert len(inbound_episodes(run)) == 1 and InboundMessage.objects.count() == 1


@pytest.mark.parametrize("path", ["/hooks/twilio/sms/", f"/hooks/twilio/status/?k={KEY}", "/hooks/twilio/voice/"])
def test_a_bad_or_missing_signature_is_refused_and_nothing_is_stored(client, acme, path):
    run_with_contact(acme, phone=DANA)
    params = load_payload("twilio/sms_stop.json")

    tampered = post_twilio(client, path, params, tamper={"Body": "hello"})
    wrong_key = post_twilio(client, path, params, token="not-our-token")
    unsigned = client.post(path, data="Body=STOP&To=%2B15005550006&From=%2B12125550123",
                           content_type="application/x-www-form-urlencoded")
    unknown_number = post_twilio(client, path, {**params, "To": "+19995550000", "From": "+19995550001"})

    assert [r.status_code for r in (tampered, wrong_key, unsigned, unknown_number)] == [403] * 4
    assert _nothing_stored()


def test_a_get_is_not_allowed(client, acme):
    assert client.get("/hooks/twilio/sms/").status_code == 405


def test_stop_suppresses_the_number_for_every_run_of_the_organization_and_start_lifts_it(client, acme, globex):
    first = run_with_contact(acme, phone=DANA)
    second = run_with_contact(acme, phone="+1 212 555 0123")
    stop = load_payload("twilio/sms_stop.json")

    response = post_twilio(client, "/hooks/twilio/sms/", stop)

    assert response.status_code == 200
    # The ToolExecutor of either run asks this before any SMS to Dana.
    for run in (first, second):
        assert suppressions.is_suppressed(run.organization, channel="sms", address="+1 (212) 555-0123")
    assert not suppressions.is_suppressed(globex, channel="sms", address=DANA)
    assert Suppression.objects.get().reason == "stop"
    # The newest open run with that number hears the STOP (a human decides what follows); the other does not.
    assert InboundMessage.objects.get().status == "matched"
    assert len(inbound_episodes(second)) == 1 and not inbound_episodes(first)

    start = {**stop, "Body": "START", "OptOutType": "START", "MessageSid": "SM" + "5" * 32}
    assert post_twilio(client, "/hooks/twilio/sms/", start).status_code == 200
    assert not suppressions.is_suppressed(acme, channel="sms", address=DANA)


def test_yes_from_a_number_that_never_opted_out_is_an_answer_for_the_run(client, acme):
    run = run_with_contact(acme, phone=DANA)
    params = {**load_payload("twilio/sms_stop.json"), "Body": "Yes", "OptOutType": ""}

    post_twilio(client, "/hooks/twilio/sms/", params)

    [episode] = inbound_episodes(run)
    assert episode.payload["text"] == "Yes" and InboundMessage.objects.get().status == "matched"


def test_help_is_answered_with_a_twiml_message(client, acme):
    run = run_with_contact(acme, phone=DANA)
    params = {**load_payload("twilio/sms_stop.json"), "Body": "help", "OptOutType": "HELP"}

    response = post_twilio(client, "/hooks/twilio/sms/", params)

    body = response.content.decode()
    assert response.status_code == 200 and response["Content-Type"].startswith("text/xml")
    assert "<Message>Acme: automated messages" in body and "Reply STOP to opt out" in body
    assert not inbound_episodes(run) and not Suppression.objects.exists()


def test_an_sms_from_an_unknown_sender_goes_to_triage(client, acme):
    response = post_twilio(client, "/hooks/twilio/sms/", load_payload("twilio/sms_inbound_mms.json"))

    assert response.status_code == 200
    message = InboundMessage.objects.get()
    assert (message.status, message.organization_id) == ("unmatched", acme.pk)
    escalation = acme.escalations.get()
    assert (escalation.kind, escalation.inbound_message_id, escalation.run_id) == ("unmatched_inbound", message.pk,
                                                                                    None)


def test_a_status_callback_records_delivery_and_an_opted_out_error_suppresses(client, acme):
    run = run_with_contact(acme, phone=DANA)
    outbox = sent(run, channel="sms", idem_key=KEY, provider_message_id="SM9a8b7c6d5e4f30211a2b3c4d5e6f7081")
    failed = load_payload("twilio/sms_status_failed_opted_out.json")

    response = post_twilio(client, f"/hooks/twilio/status/?k={KEY}", failed)
    post_twilio(client, f"/hooks/twilio/status/?k={KEY}", failed)

    assert response.status_code == 200
    event = DeliveryEvent.objects.get()
    assert (event.channel, event.idem_key, event.event_type) == ("sms", KEY, "failed")
    assert event.provider_message_id == outbox.provider_message_id
    assert suppressions.is_suppressed(acme, channel="sms", address=DANA)
    refreshed = OutboxMessage.objects.get(pk=outbox.pk)
    assert refreshed.status == "sent" and "21610" in refreshed.error
    assert not inbound_episodes(run)


def test_another_organizations_number_cannot_report_on_our_send(client, acme, globex):
    """Globex's own Twilio credentials sign a status naming Acme's send key: nothing is recorded or suppressed."""
    run = run_with_contact(acme, phone=DANA)
    sent(run, channel="sms", idem_key=KEY)
    forged = {**load_payload("twilio/sms_status_failed_opted_out.json"), "From": OTHER_NUMBER}

    response = post_twilio(client, f"/hooks/twilio/status/?k={KEY}", forged, token="globex-token")

    assert response.status_code == 200  # signed by Globex, so not a forgery of Twilio; it just acts on nothing
    assert not DeliveryEvent.objects.exists() and not Suppression.objects.exists()
    assert OutboxMessage.objects.get(idem_key=KEY).error == ""


def test_a_delivered_status_is_recorded_without_suppressing(client, acme):
    run = run_with_contact(acme, phone=DANA)
    sent(run, channel="sms", idem_key=KEY)

    post_twilio(client, f"/hooks/twilio/status/?k={KEY}", load_payload("twilio/sms_status_delivered.json"))

    assert DeliveryEvent.objects.get().event_type == "delivered"
    assert not Suppression.objects.exists()


def test_a_call_transcription_becomes_a_call_report_episode_of_the_calling_run(client, acme):
    caller = run_with_contact(acme, phone=DANA)
    newer = run_with_contact(acme, phone=DANA)
    sent(caller, channel="voice", idem_key=KEY, tool="place_call")

    response = post_twilio(client, f"/hooks/twilio/voice/?k={KEY}", load_payload("twilio/voice_transcription.json"))

    assert response.status_code == 200
    [report] = inbound_episodes(caller)
    assert report.kind == "call_report" and report.payload["channel"] == "voice"
    assert report.payload["transcript"].startswith("Hi this is Dana") and report.payload["text"] == \
        report.payload["transcript"]
    assert not inbound_episodes(newer)
    assert queued_run_ids() == [caller.pk]


def test_a_call_status_callback_is_a_delivery_event(client, acme):
    run = run_with_contact(acme, phone=DANA)
    sent(run, channel="voice", idem_key=KEY, tool="place_call")

    response = post_twilio(client, f"/hooks/twilio/status/?k={KEY}", load_payload("twilio/call_status_completed.json"))

    assert response.status_code == 200
    event = DeliveryEvent.objects.get()
    assert (event.channel, event.event_type, event.idem_key) == ("voice", "completed", KEY)
