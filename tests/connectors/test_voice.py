from datetime import timedelta
from urllib.parse import urlencode
from xml.etree import ElementTree

import pytest
from django.test import RequestFactory
from django.utils import timezone
from twilio.request_validator import RequestValidator

from connectors import registry
from connectors.base import ConnectorError, OutboundMessage
from connectors.models import DeliveryEvent
from connectors.voice import VoiceConnector
from tests.connectors.conftest import AUTH_TOKEN, OUR_NUMBER, load_payload, make_identity

pytestmark = pytest.mark.django_db

KEY = "c0" * 32
DANA = "+12125550123"


def _message(**overrides) -> OutboundMessage:
    fields = {"idem_key": KEY, "channel": "voice", "to": DANA, "body": "",
              "brief": "Hello, this is Acme Billing calling about your W-9. Please leave a message after the tone."}
    return OutboundMessage(**{**fields, **overrides})


@pytest.fixture
def connector(twilio_secrets) -> VoiceConnector:
    built = registry.connector_for(make_identity("voice", address=OUR_NUMBER, secrets=twilio_secrets))
    assert isinstance(built, VoiceConnector)
    return built


def test_send_places_one_call_that_says_the_brief_and_records_a_transcribed_answer(connector, twilio_server):
    result = connector.send(_message())

    [call] = twilio_server.calls_to("/Calls.json", method="POST")
    assert (call.first("To"), call.first("From")) == (DANA, OUR_NUMBER)
    assert call.first("StatusCallback") == f"https://lucia.example.com/hooks/twilio/status/?k={KEY}"
    twiml = ElementTree.fromstring(call.first("Twiml"))  # noqa: S314 - our own TwiML, echoed by the fake
    assert twiml.find("Say").text == _message().brief
    record = twiml.find("Record")
    assert record.get("transcribe") == "true"
    assert record.get("transcribeCallback") == f"https://lucia.example.com/hooks/twilio/voice/?k={KEY}"
    assert result.provider_message_id == twilio_server.calls[0]["sid"]


def test_an_invalid_number_is_a_permanent_error(connector, twilio_server):
    twilio_server.refuse[DANA] = 21211

    with pytest.raises(ConnectorError) as raised:
        connector.send(_message())

    assert raised.value.permanent and raised.value.code == "21211"


def test_lookup_finds_the_one_call_in_the_window(connector, twilio_server):
    started = timezone.now()
    twilio_server.add_call(to=DANA, sender=OUR_NUMBER, created=started - timedelta(days=7))
    sent = connector.send(_message())

    looked = connector.lookup(_message(), sent_after=started)

    assert (looked.found, looked.provider_message_id) == (True, sent.provider_message_id)


def test_lookup_without_a_call_in_the_window_is_not_sent(connector, twilio_server):
    started = timezone.now()
    twilio_server.add_call(to=DANA, sender=OUR_NUMBER, created=started - timedelta(days=7))

    assert connector.lookup(_message(), sent_after=started).found is False


def test_lookup_with_two_calls_in_the_window_returns_both_as_candidates_not_a_match_on_the_key(connector,
                                                                                                  twilio_server):
    started = timezone.now()
    twilio_server.add_call(to=DANA, sender=OUR_NUMBER, created=started)
    twilio_server.add_call(to=DANA, sender=OUR_NUMBER, created=started)

    looked = connector.lookup(_message(), sent_after=started)
    # The runtime adopts only a single candidate no other send of its own owns (runs.provider_faults).
    assert looked.candidates == tuple(call["sid"] for call in reversed(twilio_server.calls))


def test_lookup_leaves_out_a_call_whose_status_callback_named_another_key(connector, twilio_server):
    started = timezone.now()
    twilio_server.add_call(to=DANA, sender=OUR_NUMBER, created=started)
    DeliveryEvent.objects.create(channel="voice", provider_message_id=twilio_server.calls[0]["sid"],
                                 idem_key="another-runs-key", event_type="initiated")

    assert connector.lookup(_message(), sent_after=started).found is False


def test_lookup_failure_is_unknown_for_now(connector, twilio_server):
    twilio_server.fail_with(503)

    looked = connector.lookup(_message(), sent_after=timezone.now())
    assert (looked.found, looked.transient) == (None, True)


def _signed(path: str, params: dict, *, tamper: dict | None = None):
    signature = RequestValidator(AUTH_TOKEN).compute_signature("https://lucia.example.com" + path, params)
    return RequestFactory().post(path, data=urlencode({**params, **(tamper or {})}),
                                 content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature)


def test_verify_accepts_signed_transcriptions_and_rejects_an_edited_transcript(connector):
    params = load_payload("twilio/voice_transcription.json")
    path = f"/hooks/twilio/voice/?k={KEY}"

    assert connector.verify_request(_signed(path, params))
    assert not connector.verify_request(_signed(path, params, tamper={"TranscriptionText": "We paid."}))


def test_transcription_callback_is_a_call_report_with_the_transcript(connector):
    params = load_payload("twilio/voice_transcription.json")

    [report] = connector.parse_inbound(_signed(f"/hooks/twilio/voice/?k={KEY}", params))

    assert (report.kind, report.idem_key, report.provider_id) == ("call_report", KEY, params["TranscriptionSid"])
    assert report.text.startswith("Hi this is Dana from accounts payable")
    # On our outbound call the other party is the callee.
    assert (report.from_address, report.to_address) == (DANA, OUR_NUMBER)
    assert report.provider_message_id == params["CallSid"]


def test_call_status_callback_is_a_status_event(connector):
    params = load_payload("twilio/call_status_completed.json")

    [status] = connector.parse_inbound(_signed(f"/hooks/twilio/status/?k={KEY}", params))

    assert (status.kind, status.status, status.idem_key) == ("status", "completed", KEY)
    assert status.provider_id == f"{params['CallSid']}:completed" and status.headers["duration"] == "42"
