import hashlib
import hmac
import json
import time
from datetime import timedelta
from email.utils import parseaddr

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import RequestFactory
from django.utils import timezone

from connectors import message_ids, registry
from connectors.base import ConnectorError, OutboundMessage
from connectors.email import EmailConnector
from connectors.models import DeliveryEvent
from tests.connectors.conftest import MAIL_DOMAIN, MAILGUN_KEY, MAILGUN_SIGNING_KEY, load_payload, make_identity

pytestmark = pytest.mark.django_db

KEY = "e7" * 32
DANA = "dana@vendor.test"
PDF = b"%PDF-1.4 signed W-9"


def _message(**overrides) -> OutboundMessage:
    fields = {"idem_key": KEY, "channel": "email", "to": DANA, "subject": "W-9 for vendor onboarding",
              "body": "Hi Dana, could you send us your signed W-9?", "run_token": message_ids.reply_token(7),
              "in_reply_to": "<CAF=vendor-0@mail.vendor.test>", "references": ["<CAF=vendor-0@mail.vendor.test>"]}
    return OutboundMessage(**{**fields, **overrides})


@pytest.fixture
def connector(mailgun_server) -> EmailConnector:
    secrets = {"api_key": MAILGUN_KEY, "api_url": mailgun_server.api_url, "webhook_signing_key": MAILGUN_SIGNING_KEY}
    built = registry.connector_for(make_identity("email", address=f"billing@{MAIL_DOMAIN}", secrets=secrets))
    assert isinstance(built, EmailConnector)
    return built


def test_send_carries_the_key_in_message_id_header_and_metadata(connector, mailgun_server):
    result = connector.send(_message())

    [post] = mailgun_server.calls_to(f"/v3/{MAIL_DOMAIN}/messages")
    assert post.basic_auth() == ("api", MAILGUN_KEY)
    assert post.first("h:Message-Id") == f"<{KEY[:32]}@in.lucia.test>"
    assert post.first("h:X-Lucia-Idempotency-Key") == KEY
    assert post.first("v:idem_key") == KEY and post.first("v:run_token") == message_ids.reply_token(7)
    assert parseaddr(post.first("h:Reply-To"))[1] == message_ids.reply_address(7)
    assert post.first("h:In-Reply-To") == "<CAF=vendor-0@mail.vendor.test>"
    assert post.first("h:References") == "<CAF=vendor-0@mail.vendor.test>"
    assert post.first("to") == DANA and parseaddr(post.first("from"))[1] == f"billing@{MAIL_DOMAIN}"
    assert result.provider_message_id == f"<{KEY[:32]}@in.lucia.test>"


def test_a_refused_message_is_permanent_and_a_5xx_has_an_unknown_outcome(connector, mailgun_server):
    mailgun_server.fail_with(400)
    with pytest.raises(ConnectorError) as refused:
        connector.send(_message())
    mailgun_server.fail_with(502)
    with pytest.raises(ConnectorError) as failed:
        connector.send(_message())

    assert refused.value.permanent and not refused.value.outcome_unknown
    assert not failed.value.permanent and failed.value.outcome_unknown


def test_lookup_adopts_a_recorded_tracking_event(connector, mailgun_server):
    DeliveryEvent.objects.create(channel="email", idem_key=KEY, provider_message_id="<x@mg>", event_type="delivered")

    looked = connector.lookup(_message(), sent_after=timezone.now())

    assert (looked.found, looked.provider_message_id) == (True, "<x@mg>")
    assert mailgun_server.requests == []


def test_lookup_asks_the_events_api_for_the_key(connector, mailgun_server):
    started = timezone.now()
    connector.send(_message())

    looked = connector.lookup(_message(), sent_after=started)

    assert looked.found is True and looked.provider_message_id == f"{KEY[:32]}@in.lucia.test"
    events_call = mailgun_server.calls_to("/events")[0]
    assert (events_call.first("event"), events_call.first("recipient")) == ("accepted", DANA)


def test_lookup_says_not_sent_only_once_the_events_api_has_settled(connector, mailgun_server):
    mailgun_server.add_event(recipient=DANA, message_id="<other@mg>", variables={"idem_key": "f" * 64})

    assert connector.lookup(_message(), sent_after=timezone.now()).found is None
    assert connector.lookup(_message(), sent_after=timezone.now() - timedelta(minutes=10)).found is False


def test_lookup_failure_is_unknown(connector, mailgun_server):
    mailgun_server.fail_with(500)

    assert connector.lookup(_message(), sent_after=timezone.now() - timedelta(hours=1)).found is None


def _mailgun_signature(*, timestamp: str, token: str, key: str = MAILGUN_SIGNING_KEY) -> str:
    return hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()


def _tracking(fixture: str, *, age_s: int = 0, key: str = MAILGUN_SIGNING_KEY, token: str = "a" * 50):
    stamp = str(int(time.time()) - age_s)
    payload = load_payload(fixture, timestamp=stamp, token=token, idem_key=KEY, message_key=KEY[:32],
                           run_token=message_ids.reply_token(7),
                           signature=_mailgun_signature(timestamp=stamp, token=token, key=key))
    return RequestFactory().post("/hooks/email/mailgun/tracking/", data=json.dumps(payload),
                                 content_type="application/json")


def _inbound(*, age_s: int = 0, token: str = "b" * 50, tamper: dict | None = None):
    stamp = str(int(time.time()) - age_s)
    fields = load_payload("mailgun/inbound_reply.json", timestamp=stamp, token=token,
                          run_token=message_ids.reply_token(7), message_key=KEY[:32],
                          signature=_mailgun_signature(timestamp=stamp, token=token))
    fields.update(tamper or {})
    fields["attachment-1"] = SimpleUploadedFile("w9-signed.pdf", PDF, content_type="application/pdf")
    return RequestFactory().post("/hooks/email/mailgun/inbound/", data=fields)


def test_verify_accepts_mailgun_signatures_and_rejects_bad_or_stale_ones(connector):
    assert connector.verify_request(_tracking("mailgun/tracking_delivered.json"))
    assert connector.verify_request(_inbound())
    assert not connector.verify_request(_tracking("mailgun/tracking_delivered.json", key="not-the-key"))
    assert not connector.verify_request(_inbound(tamper={"signature": "0" * 64}))
    assert not connector.verify_request(_inbound(tamper={"token": "c" * 50}))



def test_the_signature_stamp_is_mailguns_timestamp_and_token_for_the_pipelines_checks(connector):
    stale = _tracking("mailgun/tracking_delivered.json", age_s=20 * 60)

    # The HMAC still verifies; refusing the stale time and a reused token is the webhook pipeline's job.
    assert connector.verify_request(stale)
    stamp = connector.signature_stamp(stale)
    assert stamp.nonce and abs(stamp.signed_at - (time.time() - 20 * 60)) < 5
    assert connector.signature_stamp(_inbound(tamper={"timestamp": "soon"})).signed_at is None


def test_parse_an_inbound_reply_with_its_threading_headers_and_attachment(connector):
    [reply] = connector.parse_inbound(_inbound())

    assert reply.kind == "message" and reply.provider_id == "<CAF=vendor-reply-0001@mail.vendor.test>"
    assert reply.from_address == DANA and message_ids.parse_reply_address(reply.to_address) == 7
    assert reply.subject == "Re: W-9 for vendor onboarding" and reply.text.startswith("Signed W-9 attached.")
    assert reply.headers["stripped_text"] == "Signed W-9 attached."
    assert message_ids.key_prefixes_in(reply.in_reply_to, " ".join(reply.references))[0] == KEY[:32]
    [attachment] = reply.attachments
    assert attachment["filename"] == "w9-signed.pdf" and attachment["content_type"] == "application/pdf"
    assert attachment["size"] == len(PDF) and attachment["sha256"] == hashlib.sha256(PDF).hexdigest()


@pytest.mark.parametrize(("fixture", "status"), [("mailgun/tracking_delivered.json", "delivered"),
                                                  ("mailgun/tracking_complained.json", "complained")])
def test_parse_tracking_events_carry_the_key(connector, fixture, status):
    [event] = connector.parse_inbound(_tracking(fixture, token="t" * 50))

    assert (event.kind, event.status, event.idem_key) == ("status", status, KEY)
    assert event.provider_id == "t" * 50 and event.from_address == DANA
    assert event.provider_message_id == f"<{KEY[:32]}@in.lucia.test>"
