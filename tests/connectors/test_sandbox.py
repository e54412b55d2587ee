import json
from datetime import UTC, datetime

import pytest
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.test import RequestFactory

from connectors import registry, sandbox
from connectors.base import OutboundMessage
from connectors.models import SandboxMessage
from connectors.sandbox import SandboxConnector
from tests.commit_settings import left_by, statements_run, synchronous_commit
from tests.connectors.conftest import load_payload, make_identity

pytestmark = pytest.mark.django_db

KEY = "ab" * 32
VIRTUAL_NOW = datetime(2031, 3, 4, 9, 0, tzinfo=UTC)


def _message(**overrides) -> OutboundMessage:
    fields = {"idem_key": KEY, "channel": "email", "to": "dana@vendor.test", "subject": "W-9",
              "body": "Could you send the W-9?", "run_token": "7-abc", "sent_at": VIRTUAL_NOW}
    return OutboundMessage(**{**fields, **overrides})


@pytest.fixture
def connector() -> SandboxConnector:
    identity = make_identity("email", address="billing@acme.test", secrets={}, sandbox=True)
    built = registry.connector_for(identity)
    assert isinstance(built, SandboxConnector)
    return built


def test_a_sandbox_identity_gets_the_sandbox_connector_whatever_its_channel():
    identity = make_identity("sms", address="+15005550006", secrets={"auth_token": "x"}, sandbox=True)

    assert isinstance(registry.connector_for(identity), SandboxConnector)


def test_send_stores_the_message_with_its_key_at_the_run_clock(connector):
    result = connector.send(_message())

    stored = SandboxMessage.objects.get()
    assert stored.idem_key == KEY and stored.channel == "email" and stored.recipient == "dana@vendor.test"
    assert stored.payload["body"] == "Could you send the W-9?" and stored.payload["run_token"] == "7-abc"
    assert stored.created_at == VIRTUAL_NOW == result.accepted_at
    assert result.provider_message_id == stored.provider_message_id


def test_resending_the_same_key_stores_nothing_new_and_keeps_the_first_text(connector):
    first = connector.send(_message())
    again = connector.send(_message(body="A rewritten text after a crash"))

    assert SandboxMessage.objects.count() == 1
    assert again.provider_message_id == first.provider_message_id
    assert SandboxMessage.objects.get().payload["body"] == "Could you send the W-9?"


def _inserts(send) -> list[tuple[str, dict]]:
    """The sandbox inserts `send()` ran, with their parameters."""
    return statements_run(send, picked=lambda sql: "INSERT INTO connectors_sandboxmessage" in sql)


def _left_by(insert: tuple[str, dict]) -> str:
    """synchronous_commit as that insert leaves its transaction (run again for another key, rolled back)."""
    sql, params = insert
    return left_by(sql, {**params, "key": "another key"})


@pytest.mark.django_db(transaction=True)
def test_a_send_outside_a_transaction_is_committed_at_once_and_leaves_the_session_as_it_was(connector):
    before = synchronous_commit()
    results = []

    [insert] = _inserts(lambda: results.append(connector.send(_message())))

    assert _left_by(insert) == "off"  # its own commit does not wait for the disk
    assert synchronous_commit() == before
    other = connections.create_connection(DEFAULT_DB_ALIAS)  # another session sees it committed
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT provider_message_id FROM connectors_sandboxmessage WHERE idem_key = %s", [KEY])
            stored = cursor.fetchall()
    finally:
        other.close()
    assert stored == [(results[0].provider_message_id,)]


def test_a_send_inside_a_callers_transaction_leaves_its_commit_as_the_caller_chose(connector):
    with transaction.atomic():
        before = synchronous_commit()
        [insert] = _inserts(lambda: connector.send(_message()))

        assert _left_by(insert) == "on"
        assert synchronous_commit() == before
    assert SandboxMessage.objects.filter(idem_key=KEY).exists()


def test_lookup_knows_for_sure(connector):
    assert connector.lookup(_message(), sent_after=VIRTUAL_NOW).found is False

    sent = connector.send(_message())
    looked = connector.lookup(_message(), sent_after=VIRTUAL_NOW)

    assert looked.found is True and looked.provider_message_id == sent.provider_message_id


def _post(body: bytes, **headers):
    return RequestFactory().post("/hooks/sandbox/", data=body, content_type="application/json", **headers)


def test_verify_accepts_only_bodies_signed_with_the_secret_key(connector):
    body = json.dumps(load_payload("sandbox/inbound_reply.json")).encode()
    signature = sandbox.sign_body(body)

    assert connector.verify_request(_post(body, HTTP_X_LUCIA_SANDBOX_SIGNATURE=signature))
    assert not connector.verify_request(_post(body + b" ", HTTP_X_LUCIA_SANDBOX_SIGNATURE=signature))
    assert not connector.verify_request(_post(body, HTTP_X_LUCIA_SANDBOX_SIGNATURE="0" * 64))
    assert not connector.verify_request(_post(body))


def test_parse_inbound_reads_simulated_messages(connector):
    body = json.dumps(load_payload("sandbox/inbound_reply.json")).encode()

    reply, stop = connector.parse_inbound(_post(body))

    assert (reply.provider_id, reply.kind, reply.from_address) == ("sim-7-1", "message", "dana@vendor.test")
    assert reply.in_reply_to.startswith("<0123456789abcdef") and reply.attachments[0]["filename"] == "w9.pdf"
    assert (stop.kind, stop.text) == ("stop", "STOP")


def test_parse_inbound_refuses_an_unknown_kind(connector):
    body = json.dumps({"provider_id": "x", "kind": "teleport"}).encode()

    with pytest.raises(ValueError, match="teleport"):
        connector.parse_inbound(_post(body))


def test_the_registry_maps_each_channel_to_its_class_and_refuses_unknown_ones():
    assert {channel: registry.connector_class(channel).__name__ for channel in registry.CONNECTORS} == {
        "email": "EmailConnector", "sms": "SmsConnector", "voice": "VoiceConnector", "slack": "SlackConnector",
        "sandbox": "SandboxConnector",
    }
    with pytest.raises(KeyError):
        registry.connector_class("fax")
