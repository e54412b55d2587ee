"""Each channel end to end through its real client library: a run sends, the person answers, the run hears it.

The agent's tool call goes through runs.tools.dispatch and the ToolExecutor to a local fake of the provider;
the answer is posted to the real webhook URL as the provider posts it, signed with the provider's own code.
Another organization, with its own sender on the channel, chases the same person in a run created later,
so "the newest run with that address" alone would pick the wrong one.
"""

import time
from collections.abc import Callable, Iterator
from email.utils import parseaddr
from xml.etree import ElementTree

import pytest

from agents.models import Organization
from connectors import identities, message_ids
from connectors.models import InboundMessage
from runs.models import Contact, OutboxMessage, OutboxStatus, Run
from tests.connectors.conftest import MAILGUN_SIGNING_KEY, load_payload
from tests.fakes.provider_server import FakeServer
from tests.lucia_site.webhooks import support as w
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

# The other organization's own sender per channel (its identity is never the one a reply is for).
OTHER_SENDER = {"email": "ap@mg.globex.test", "sms": "+15005550007", "voice": "+15005550007", "slack": "T0GLOBEX"}
MAILGUN_INBOUND = "/hooks/email/mailgun/inbound/"


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = w.PUBLIC_URL  # callback URLs start with it; Twilio signs over it
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"
    settings.LUCIA_GUARDRAIL_MODEL = ""
    # anymail's Mailgun inbound view verifies posts with this key.
    settings.ANYMAIL = {**settings.ANYMAIL, "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY}


def _serve(start: Callable[[], FakeServer]) -> Iterator[FakeServer]:
    server = start()
    yield server
    server.stop()


@pytest.fixture
def twilio() -> Iterator[FakeServer]:
    yield from _serve(s.start_twilio)


@pytest.fixture
def mailgun() -> Iterator[FakeServer]:
    yield from _serve(s.start_mailgun)


@pytest.fixture
def slack() -> Iterator[FakeServer]:
    yield from _serve(s.start_slack)


def _runs(channel: str, add_identity: Callable[[Organization], object]) -> tuple[Run, Run]:
    """Our run (its organization sends from the fake) and, created after it, another organization's run
    with a contact at the same email, number and Slack user."""
    plan = s.every_channel_plan()
    ours = s.real_run(plan)
    add_identity(ours.organization)
    theirs = s.real_run(plan)
    identities.create_identity(theirs.organization, channel=channel, address=OTHER_SENDER[channel],
                               secret_values={"auth_token": "globex-token", "signing_secret": "globex-secret"})
    Contact.objects.filter(run__in=(ours, theirs)).update(slack_user=s.VENDOR_SLACK)
    return ours, theirs


def _send(run: Run, tool: str, arguments: dict) -> OutboxMessage:
    """The agent's tool call, as the loop makes it; returns the one outbox row, sent."""
    result, _ = s.dispatch(run, h.add_episode(run, "start"), tool, {"to_role": "vendor", **arguments})
    assert (result["ok"], result["status"]) == (True, "sent"), result
    row = OutboxMessage.objects.get(run=run)
    assert row.status == OutboxStatus.SENT and row.provider_message_id
    return row


def _callback(path: str, row: OutboxMessage) -> str:
    return f"{w.PUBLIC_URL}{path}?k={row.idem_key}"


def _assert_heard(ours: Run, theirs: Run, *, kind: str, text: str) -> None:
    """The answer is stored matched to our run, is an episode of it (none of the other run) and wakes it."""
    message = InboundMessage.objects.get()
    assert (message.status, message.matched_run_id, message.organization_id) == (
        "matched", ours.pk, ours.organization_id)
    [episode] = w.inbound_episodes(ours)
    assert episode.kind == kind and episode.payload["text"] == text
    assert episode.payload["inbound_message_id"] == message.pk
    assert not w.inbound_episodes(theirs)
    assert queued_run_ids() == [ours.pk]


def test_an_email_goes_out_through_mailgun_and_the_reply_reaches_the_run_that_sent_it(client, mailgun):
    ours, theirs = _runs("email", lambda organization: s.email_identity(organization, mailgun))

    row = _send(ours, "send_email", s.EMAIL)

    [post] = mailgun.calls_to(f"/v3/{s.MAIL_DOMAIN}/messages", method="POST")
    assert post.first("to") == h.VENDOR_EMAIL and post.first("subject") == s.EMAIL["subject"]
    assert post.first("h:Message-Id") == message_ids.message_id_for(row.idem_key) == row.provider_message_id
    assert post.first("h:X-Lucia-Idempotency-Key") == row.idem_key
    # The vendor answers the Reply-To address, in reply to the Message-ID we sent.
    reply_to = parseaddr(post.first("h:Reply-To"))[1]
    stamp, token = str(int(time.time())), "b" * 50
    reply = load_payload(
        "mailgun/inbound_reply.json", timestamp=stamp, token=token,
        signature=w.mailgun_signature(timestamp=stamp, token=token),
        run_token=reply_to.partition("@")[0].removeprefix(message_ids.REPLY_PREFIX),
        message_key=post.first("h:Message-Id").strip("<>").partition("@")[0],
    )
    response = client.post(MAILGUN_INBOUND, data={**reply, "attachment-count": "0"})

    assert response.status_code == 200
    _assert_heard(ours, theirs, kind="inbound", text=reply["body-plain"])


def test_an_sms_goes_out_through_twilio_and_the_reply_reaches_the_run_of_the_number_owner(client, twilio):
    ours, theirs = _runs("sms", lambda organization: s.sms_identity(organization, twilio))

    row = _send(ours, "send_sms", s.SMS)

    [create] = twilio.calls_to("/Messages.json", method="POST")
    assert (create.first("To"), create.first("From")) == (s.VENDOR_NUMBER, s.OUR_NUMBER)
    assert create.first("Body").startswith(s.SMS["body"])
    assert create.first("StatusCallback") == _callback("/hooks/twilio/status/", row)
    assert row.provider_message_id == twilio.messages[0]["sid"]
    answer = {**load_payload("twilio/sms_inbound_mms.json"), "AccountSid": s.ACCOUNT_SID,
              "From": s.VENDOR_NUMBER, "To": s.OUR_NUMBER, "NumMedia": "0"}
    response = w.post_twilio(client, "/hooks/twilio/sms/", answer, token=s.AUTH_TOKEN)

    assert response.status_code == 200
    _assert_heard(ours, theirs, kind="inbound", text=answer["Body"])


def test_a_slack_message_goes_out_through_the_web_api_and_the_dm_reply_reaches_the_run(client, slack):
    ours, theirs = _runs("slack", lambda organization: s.slack_identity(organization, slack))

    row = _send(ours, "send_slack", {"text": "Hi Dana, could you share the signed W-9?"})

    [post] = slack.calls_to("/chat.postMessage", method="POST")
    assert post.json()["channel"] == s.VENDOR_SLACK
    assert post.json()["metadata"] == {"event_type": "lucia_send", "event_payload": {"idem_key": row.idem_key}}
    dm, _, ts = row.provider_message_id.partition(":")
    assert slack.channels[dm][0]["ts"] == ts
    event = load_payload("slack/message_im.json")
    event["event"].update(channel=dm, user=s.VENDOR_SLACK, team=s.SLACK_TEAM)
    response = w.post_slack(client, {**event, "team_id": s.SLACK_TEAM}, secret=s.SIGNING_SECRET)

    assert response.status_code == 200
    _assert_heard(ours, theirs, kind="inbound", text=event["event"]["text"])


def test_a_call_goes_out_through_twilio_and_its_transcript_reaches_the_run_that_called(client, twilio):
    ours, theirs = _runs("voice", lambda organization: s.voice_identity(organization, twilio))
    brief = "Ask Dana when the signed W-9 will be sent."

    row = _send(ours, "place_call", {"brief": brief})
    # Now the organization's newest run on the number: only the key in the callback URL names ours.
    newer = s.real_run(s.every_channel_plan(), organization=ours.organization)

    [create] = twilio.calls_to("/Calls.json", method="POST")
    assert (create.first("To"), create.first("From")) == (s.VENDOR_NUMBER, s.OUR_NUMBER)
    assert create.first("StatusCallback") == _callback("/hooks/twilio/status/", row)
    twiml = ElementTree.fromstring(create.first("Twiml"))  # noqa: S314 - our own TwiML, echoed by the fake
    assert twiml.find("Say").text == brief
    transcribe_url = twiml.find("Record").get("transcribeCallback")
    assert transcribe_url == _callback("/hooks/twilio/voice/", row)
    assert row.provider_message_id == twilio.calls[0]["sid"]
    # Twilio posts the transcription where the TwiML told it to.
    transcription = {**load_payload("twilio/voice_transcription.json"), "AccountSid": s.ACCOUNT_SID,
                     "CallSid": row.provider_message_id, "From": s.OUR_NUMBER, "To": s.VENDOR_NUMBER}
    response = w.post_twilio(client, transcribe_url.removeprefix(w.PUBLIC_URL), transcription, token=s.AUTH_TOKEN)

    assert response.status_code == 200
    _assert_heard(ours, theirs, kind="call_report", text=transcription["TranscriptionText"])
    assert w.inbound_episodes(ours)[0].payload["transcript"] == transcription["TranscriptionText"]
    assert not w.inbound_episodes(newer)
