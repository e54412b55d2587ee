from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.test import RequestFactory
from django.utils import timezone
from twilio.request_validator import RequestValidator

from connectors import registry
from connectors.base import ConnectorError, OutboundMessage
from connectors.models import DeliveryEvent
from connectors.sms import SmsConnector
from tests.connectors.conftest import AUTH_TOKEN, OUR_NUMBER, load_payload, make_identity

pytestmark = pytest.mark.django_db

KEY = "5a" * 32
DANA = "+12125550123"


def _message(**overrides) -> OutboundMessage:
    fields = {"idem_key": KEY, "channel": "sms", "to": DANA,
              "body": "Hi Dana, could you send the W-9? Reply STOP to opt out."}
    return OutboundMessage(**{**fields, **overrides})


@pytest.fixture
def connector(twilio_secrets) -> SmsConnector:
    built = registry.connector_for(make_identity("sms", address=OUR_NUMBER, secrets=twilio_secrets))
    assert isinstance(built, SmsConnector)
    return built


def test_send_makes_one_create_call_with_the_key_in_the_status_callback(connector, twilio_server):
    result = connector.send(_message())

    [call] = twilio_server.calls_to("/Messages.json", method="POST")
    assert call.first("To") == DANA and call.first("From") == OUR_NUMBER
    assert call.first("Body") == _message().body
    assert call.first("StatusCallback") == f"https://lucia.example.com/hooks/twilio/status/?k={KEY}"
    assert result.provider_message_id == twilio_server.messages[0]["sid"]


@pytest.mark.parametrize("code", [21610, 21211])
def test_opted_out_or_invalid_numbers_are_permanent_errors(connector, twilio_server, code):
    twilio_server.refuse[DANA] = code

    with pytest.raises(ConnectorError) as raised:
        connector.send(_message())

    assert raised.value.permanent is True and raised.value.code == str(code)
    assert not raised.value.outcome_unknown


def test_a_provider_5xx_on_send_is_transient_with_unknown_outcome(connector, twilio_server):
    twilio_server.fail_with(500)

    with pytest.raises(ConnectorError) as raised:
        connector.send(_message())

    assert raised.value.permanent is False and raised.value.outcome_unknown is True


def test_lookup_finds_the_message_sent_for_the_key(connector, twilio_server):
    started = timezone.now()
    sent = connector.send(_message())

    # The model may rewrite surrounding text after a crash; the key's stored body is what was sent.
    looked = connector.lookup(_message(), sent_after=started)

    assert looked.found is True and looked.provider_message_id == sent.provider_message_id
    # A body-hash match is a candidate for the runtime to confirm, not a match on our key.
    assert looked.candidates == (sent.provider_message_id,)
    assert twilio_server.calls_to("/Messages.json", method="GET")[0].first("To") == DANA


def test_lookup_leaves_out_a_same_text_message_whose_status_callback_named_another_key(connector, twilio_server):
    started = timezone.now()
    twilio_server.add_message(to=DANA, sender=OUR_NUMBER, body=_message().body, created=started)
    DeliveryEvent.objects.create(channel="sms", provider_message_id=twilio_server.messages[0]["sid"],
                                 idem_key="another-runs-key", event_type="delivered")

    assert connector.lookup(_message(), sent_after=started).found is False


def test_lookup_does_not_count_other_bodies_or_older_messages(connector, twilio_server):
    started = timezone.now()
    twilio_server.add_message(to=DANA, sender=OUR_NUMBER, body="Another reminder", created=started)
    twilio_server.add_message(to=DANA, sender=OUR_NUMBER, body=_message().body, created=started - timedelta(days=3))

    assert connector.lookup(_message(), sent_after=started).found is False


def test_lookup_failure_is_unknown_for_now_not_absent(connector, twilio_server):
    twilio_server.fail_with(500)

    looked = connector.lookup(_message(), sent_after=timezone.now())
    assert (looked.found, looked.transient) == (None, True)


def test_lookup_adopts_a_recorded_status_callback_without_asking(connector, twilio_server):
    DeliveryEvent.objects.create(channel="sms", idem_key=KEY, provider_message_id="SMabc", event_type="delivered")
    twilio_server.fail_with(500)

    looked = connector.lookup(_message(), sent_after=timezone.now())

    assert (looked.found, looked.provider_message_id) == (True, "SMabc")
    assert twilio_server.requests == []


def _signed(path: str, params: dict, *, token: str = AUTH_TOKEN, tamper: dict | None = None):
    url = "https://lucia.example.com" + path
    signature = RequestValidator(token).compute_signature(url, params)
    body = urlencode({**params, **(tamper or {})})
    return RequestFactory().post(path, data=body, content_type="application/x-www-form-urlencoded",
                                 HTTP_X_TWILIO_SIGNATURE=signature)


def test_verify_accepts_twilios_signature_and_rejects_tampering(connector):
    params = load_payload("twilio/sms_inbound_mms.json")

    assert connector.verify_request(_signed("/hooks/twilio/sms/", params))
    assert not connector.verify_request(_signed("/hooks/twilio/sms/", params, tamper={"Body": "STOP"}))
    assert not connector.verify_request(_signed("/hooks/twilio/sms/", params, token="someone-elses-token"))
    unsigned = RequestFactory().post("/hooks/twilio/sms/", data=urlencode(params),
                                     content_type="application/x-www-form-urlencoded")
    assert not connector.verify_request(unsigned)


def test_verify_covers_the_query_string_of_status_callbacks(connector):
    params = load_payload("twilio/sms_status_delivered.json")

    assert connector.verify_request(_signed(f"/hooks/twilio/status/?k={KEY}", params))
    request = _signed(f"/hooks/twilio/status/?k={KEY}", params)
    request.META["QUERY_STRING"] = "k=" + "0" * 64
    assert not connector.verify_request(request)


def test_parse_inbound_mms_with_media_metadata(connector):
    [parsed] = connector.parse_inbound(_signed("/hooks/twilio/sms/", load_payload("twilio/sms_inbound_mms.json")))

    assert parsed.kind == "message" and parsed.provider_id.startswith("MM5ef8")
    assert (parsed.from_address, parsed.to_address) == (DANA, OUR_NUMBER)
    assert parsed.text.startswith("Here is the signed W-9")
    [media] = parsed.attachments
    assert media["content_type"] == "application/pdf" and media["url"].startswith("https://api.twilio.com/")


@pytest.mark.parametrize(("body", "kind"), [("Stop", "stop"), ("unsubscribe", "stop"), ("START", "start"),
                                            ("help", "help"), ("stop sending me these please", "message")])
def test_opt_out_keywords_become_their_own_kind(connector, body, kind):
    params = {**load_payload("twilio/sms_stop.json"), "Body": body}
    params.pop("OptOutType")

    [parsed] = connector.parse_inbound(_signed("/hooks/twilio/sms/", params))

    assert parsed.kind == kind


def test_parse_status_callback_carries_the_key_and_error_code(connector):
    params = load_payload("twilio/sms_status_failed_opted_out.json")

    [parsed] = connector.parse_inbound(_signed(f"/hooks/twilio/status/?k={KEY}", params))

    assert (parsed.kind, parsed.status, parsed.idem_key) == ("status", "failed", KEY)
    assert parsed.provider_id == f"{params['MessageSid']}:failed" and parsed.headers["error_code"] == "21610"
