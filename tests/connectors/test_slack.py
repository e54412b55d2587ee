import json
import time
from datetime import timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from connectors import registry
from connectors.base import ConnectorError, OutboundMessage
from connectors.slack import SlackConnector
from tests.connectors.conftest import BOT_TOKEN, SIGNING_SECRET, load_payload, make_identity
from tests.fakes.slack_server import ARCHIVED

pytestmark = pytest.mark.django_db

KEY = "d1" * 32


def _message(**overrides) -> OutboundMessage:
    fields = {"idem_key": KEY, "channel": "slack", "to": "U0DANA", "body": "Hi Dana, could you share the W-9?"}
    return OutboundMessage(**{**fields, **overrides})


@pytest.fixture
def connector(slack_server) -> SlackConnector:
    secrets = {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_base_url": slack_server.base_url}
    built = registry.connector_for(make_identity("slack", address="T0ACME", secrets=secrets))
    assert isinstance(built, SlackConnector)
    return built


def test_send_posts_once_with_the_key_in_message_metadata(connector, slack_server):
    result = connector.send(_message())

    [post] = slack_server.calls_to("/chat.postMessage")
    sent = post.json()
    assert sent["channel"] == "U0DANA" and sent["text"] == _message().body
    assert sent["metadata"] == {"event_type": "lucia_send", "event_payload": {"idem_key": KEY}}
    assert result.provider_message_id == f"D0DANA:{slack_server.channels['D0DANA'][0]['ts']}"


def test_send_in_a_thread_answers_the_thread(connector, slack_server):
    connector.send(_message(to="C0VENDORS", in_reply_to="C0VENDORS:1718000000.000100"))

    assert slack_server.calls_to("/chat.postMessage")[0].json()["thread_ts"] == "1718000000.000100"


def test_an_archived_channel_is_a_permanent_error(connector):
    with pytest.raises(ConnectorError) as raised:
        connector.send(_message(to=ARCHIVED))

    assert raised.value.permanent and raised.value.code == "is_archived"


def test_lookup_finds_the_post_by_its_metadata_key(connector, slack_server):
    started = timezone.now()
    sent = connector.send(_message())

    looked = connector.lookup(_message(), sent_after=started)

    assert (looked.found, looked.provider_message_id) == (True, sent.provider_message_id)
    history = slack_server.calls_to("/conversations.history")[0]
    assert history.first("include_all_metadata") in ("1", "true") and history.first("channel") == "D0DANA"


def test_lookup_ignores_posts_of_other_keys_and_older_posts(connector, slack_server):
    started = timezone.now()
    metadata = {"event_type": "lucia_send", "event_payload": {"idem_key": KEY}}
    slack_server.post("D0DANA", text="old", metadata=metadata, at=(started - timedelta(days=2)).timestamp())
    slack_server.post("D0DANA", text="other", metadata={"event_type": "lucia_send",
                                                         "event_payload": {"idem_key": "e" * 64}})

    assert connector.lookup(_message(), sent_after=started).found is False


def test_lookup_of_a_thread_reply_reads_the_thread(connector, slack_server):
    started = timezone.now()
    threaded = _message(to="C0VENDORS", in_reply_to="C0VENDORS:1718000000.000100")
    connector.send(threaded)

    assert connector.lookup(threaded, sent_after=started).found is True
    assert slack_server.calls_to("/conversations.replies")


def test_lookup_failure_is_unknown(connector, slack_server):
    slack_server.fail_with(500)

    assert connector.lookup(_message(), sent_after=timezone.now()).found is None


def _signed(payload: dict, *, timestamp: int | None = None, secret: str = SIGNING_SECRET, body: bytes | None = None):
    raw = json.dumps(payload).encode()
    stamp = str(timestamp or int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=raw)
    return RequestFactory().post("/hooks/slack/events/", data=body or raw, content_type="application/json",
                                 HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp, HTTP_X_SLACK_SIGNATURE=signature)


def test_verify_accepts_slacks_signature_and_rejects_tampering_and_replays(connector):
    payload = load_payload("slack/message_im.json")

    assert connector.verify_request(_signed(payload))
    assert not connector.verify_request(_signed(payload, body=json.dumps({**payload, "team_id": "T0EVIL"}).encode()))
    assert not connector.verify_request(_signed(payload, secret="not-our-secret"))
    # An old timestamp still verifies; the webhook pipeline refuses it by the stamp's time.
    old = _signed(payload, timestamp=int(time.time()) - 6 * 60)
    assert connector.verify_request(old)
    assert connector.signature_stamp(old).signed_at == int(time.time()) - 6 * 60
    assert not connector.verify_request(_signed(payload, body=b"\xff\xfe not utf-8"))


def test_parse_a_direct_message(connector):
    [parsed] = connector.parse_inbound(_signed(load_payload("slack/message_im.json")))

    assert (parsed.provider_id, parsed.kind) == ("Ev077H2BPKQ1", "message")
    assert (parsed.from_address, parsed.to_address) == ("U0DANA", "D0DANA")
    assert parsed.text == "I'll get the W-9 over by Friday" and parsed.thread_ref is None


def test_parse_a_thread_reply_with_a_file(connector):
    [parsed] = connector.parse_inbound(_signed(load_payload("slack/thread_reply_file_share.json")))

    assert parsed.thread_ref == "C0VENDORS:1718000000.000100"
    [attachment] = parsed.attachments
    assert (attachment["filename"], attachment["content_type"], attachment["size"]) == (
        "w9-signed.pdf", "application/pdf", 48213)


def test_parse_an_app_mention_in_a_thread(connector):
    [parsed] = connector.parse_inbound(_signed(load_payload("slack/app_mention.json")))

    assert parsed.thread_ref == "C0VENDORS:1718000000.000100" and "invoice was paid" in parsed.text


@pytest.mark.parametrize("fixture", ["slack/bot_message.json", "slack/url_verification.json"])
def test_bot_echoes_and_url_verification_carry_no_inbound_message(connector, fixture):
    assert connector.parse_inbound(_signed(load_payload(fixture))) == []


def test_a_slack_5xx_on_send_has_an_unknown_outcome(connector, slack_server):
    slack_server.fail_with(502)

    with pytest.raises(ConnectorError) as raised:
        connector.send(_message())

    assert not raised.value.permanent and raised.value.outcome_unknown
