"""Provider faults classified with the real client libraries: nothing left the process, or the outcome is unknown.

Twilio (requests), Mailgun (anymail over requests) and Slack (slack_sdk over urllib) against a closed
port (connection refused), an unresolvable host (DNS), and the local fakes taking the request and then
resetting the connection or answering too late.
"""

import socket

import pytest
from django.utils import timezone

from connectors import registry, slack, twilio_client
from connectors.base import ConnectorError, OutboundMessage
from tests.connectors.conftest import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    BOT_TOKEN,
    MAIL_DOMAIN,
    MAILGUN_KEY,
    OUR_NUMBER,
    SIGNING_SECRET,
    make_identity,
)

pytestmark = pytest.mark.django_db

KEY = "k" * 64
NOWHERE = "http://lucia-h6-nowhere.invalid"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _sms(base_url: str):
    secrets = {"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "api_base_url": base_url}
    return registry.connector_for(make_identity("sms", address=OUR_NUMBER, secrets=secrets)), OutboundMessage(
        idem_key=KEY, channel="sms", to="+15555550101", body="Hi Dana")


def _email(api_url: str):
    secrets = {"api_key": MAILGUN_KEY, "api_url": api_url}
    return registry.connector_for(make_identity("email", address=f"billing@{MAIL_DOMAIN}", secrets=secrets)), \
        OutboundMessage(idem_key=KEY, channel="email", to="dana@vendor.test", subject="W-9", body="Hi Dana")


def _slack(base_url: str):
    secrets = {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_base_url": base_url}
    return registry.connector_for(make_identity("slack", address="T0ACME", secrets=secrets)), OutboundMessage(
        idem_key=KEY, channel="slack", to="C0VENDORS", body="Hi Dana")


def _failure(connector, message) -> ConnectorError:
    with pytest.raises(ConnectorError) as raised:
        connector.send(message)
    return raised.value


@pytest.mark.parametrize("where", ["closed port", "unresolvable host"])
@pytest.mark.parametrize(("build", "path"), [(_sms, ""), (_email, "/v3/"), (_slack, "/api/")],
                         ids=["twilio", "mailgun", "slack"])
def test_nothing_left_the_process_is_retryable_without_a_lookup(build, path, where):
    base = closed_port_url() if where == "closed port" else NOWHERE
    failure = _failure(*build(base + path))

    assert not failure.permanent and not failure.outcome_unknown
    assert failure.code == "unreachable"


def test_a_twilio_connection_reset_after_sending_has_an_unknown_outcome(twilio_server):
    twilio_server.drop_after_processing()
    failure = _failure(*_sms(twilio_server.url))

    assert failure.outcome_unknown and not failure.permanent
    assert len(twilio_server.messages) == 1  # it did go out: only a lookup can tell


def test_a_twilio_timeout_after_sending_has_an_unknown_outcome(twilio_server, monkeypatch):
    monkeypatch.setattr(twilio_client, "REQUEST_TIMEOUT_S", 0.3)
    twilio_server.stall_after_processing(1.0)

    assert _failure(*_sms(twilio_server.url)).outcome_unknown


def test_a_mailgun_connection_reset_after_sending_has_an_unknown_outcome(mailgun_server):
    mailgun_server.drop_after_processing()

    assert _failure(*_email(mailgun_server.api_url)).outcome_unknown


@pytest.mark.parametrize("fault", ["reset", "timeout"])
def test_a_slack_fault_after_posting_has_an_unknown_outcome(slack_server, monkeypatch, fault):
    if fault == "reset":
        slack_server.drop_after_processing()
    else:
        monkeypatch.setattr(slack, "REQUEST_TIMEOUT_S", 0.3)
        slack_server.stall_after_processing(1.0)

    failure = _failure(*_slack(slack_server.base_url))

    assert failure.outcome_unknown and not failure.permanent


def test_a_lookup_that_cannot_reach_the_provider_is_asked_again_later():
    connector, message = _sms(closed_port_url())
    looked = connector.lookup(message, sent_after=timezone.now())

    assert (looked.found, looked.transient) == (None, True)


@pytest.mark.parametrize(("build", "path"), [(_sms, ""), (_email, "/v3/"), (_slack, "/api/")],
                         ids=["twilio", "mailgun", "slack"])
def test_a_failed_tls_handshake_is_retryable_without_a_lookup(twilio_server, build, path):
    # HTTPS to a plain-HTTP server: the handshake fails before a byte of the request is written.
    failure = _failure(*build(twilio_server.url.replace("http://", "https://") + path))

    assert not failure.permanent and not failure.outcome_unknown
    assert twilio_server.requests == []
