import time

import pytest

from connectors.models import InboundMessage
from runs.models import Episode
from tests.connectors.conftest import BOT_TOKEN, SIGNING_SECRET, load_payload
from tests.factories import OrganizationFactory
from tests.lucia_site.webhooks.support import identity, inbound_episodes, post_slack, run_with_contact, sent
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

THREAD_ROOT = "C0VENDORS:1718000000.000100"


@pytest.fixture
def acme():
    organization = OrganizationFactory(name="Acme")
    identity(organization, "slack", "T0ACME", bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    return organization


def test_url_verification_is_answered_with_the_challenge_once_signed(client, acme):
    payload = load_payload("slack/url_verification.json")

    answered = post_slack(client, payload)
    forged = post_slack(client, payload, secret="not-the-secret")

    assert answered.status_code == 200 and answered.json() == {"challenge": payload["challenge"]}
    assert forged.status_code == 403


def test_a_thread_reply_reaches_the_run_whose_message_started_the_thread(client, acme):
    asker = run_with_contact(acme, slack_user="U0SOMEONE")
    newer_with_dana = run_with_contact(acme, slack_user="U0DANA")
    sent(asker, channel="slack", idem_key="a" * 64, provider_message_id=THREAD_ROOT)

    response = post_slack(client, load_payload("slack/thread_reply_file_share.json"))

    assert response.status_code == 200
    [episode] = inbound_episodes(asker)
    assert episode.payload["channel"] == "slack" and episode.payload["text"] == "here you go"
    assert episode.payload["attachments"][0]["filename"] == "w9-signed.pdf"
    assert episode.dedupe_key == "slack:Ev077H3ZZZ02"
    assert not inbound_episodes(newer_with_dana)
    assert queued_run_ids() == [asker.pk]


def test_a_direct_message_reaches_the_newest_open_run_with_that_slack_user(client, acme):
    run = run_with_contact(acme, slack_user="U0DANA")

    post_slack(client, load_payload("slack/message_im.json"))

    [episode] = inbound_episodes(run)
    assert episode.payload["text"] == "I'll get the W-9 over by Friday"
    assert InboundMessage.objects.get().status == "matched"


def test_a_retried_event_is_one_episode(client, acme):
    run = run_with_contact(acme, slack_user="U0DANA")
    payload = load_payload("slack/app_mention.json")

    now = int(time.time())
    post_slack(client, payload, timestamp=now - 60)
    # Slack signs each retry anew (a new timestamp): the retry passes and is stored once. The same signed request
    # again is a replay (one timestamp for both: a second boundary between them made two signed retries).
    retried = post_slack(client, payload, headers={"HTTP_X_SLACK_RETRY_NUM": "1"}, timestamp=now)
    replayed = post_slack(client, payload, headers={"HTTP_X_SLACK_RETRY_NUM": "1"}, timestamp=now)

    assert (retried.status_code, replayed.status_code) == (200, 403)
    assert len(inbound_episodes(run)) == 1 and InboundMessage.objects.count() == 1


def test_bot_messages_are_ignored_and_not_stored(client, acme):
    run_with_contact(acme, slack_user="U0DANA")

    response = post_slack(client, load_payload("slack/bot_message.json"))

    assert response.status_code == 200
    assert not InboundMessage.objects.exists() and not Episode.objects.filter(kind="inbound").exists()


def test_a_bad_signature_or_an_unknown_team_stores_nothing(client, acme):
    run_with_contact(acme, slack_user="U0DANA")
    payload = load_payload("slack/message_im.json")

    forged = post_slack(client, payload, secret="not-the-secret")
    unknown_team = post_slack(client, {**payload, "team_id": "T0OTHER", "api_app_id": "A0OTHER"})
    unsigned = client.post("/hooks/slack/events/", data=payload, content_type="application/json")

    assert [r.status_code for r in (forged, unknown_team, unsigned)] == [403, 403, 403]
    assert not InboundMessage.objects.exists() and not Episode.objects.filter(kind="inbound").exists()


def test_a_thread_rooted_in_another_organizations_message_is_not_theirs(client, acme):
    other = run_with_contact(OrganizationFactory(), slack_user="U0DANA")
    sent(other, channel="slack", idem_key="b" * 64, provider_message_id=THREAD_ROOT)

    post_slack(client, load_payload("slack/thread_reply_file_share.json"))

    assert not inbound_episodes(other)
    message = InboundMessage.objects.get()
    assert (message.status, message.organization_id) == ("unmatched", acme.pk)
    assert acme.escalations.get().kind == "unmatched_inbound"


def test_a_signed_message_carrying_a_nul_is_a_400_and_stores_nothing(client, acme):
    run_with_contact(acme, slack_user="U0DANA")
    payload = load_payload("slack/message_im.json")
    payload["event"]["text"] = "W-9\u0000attached"

    response = post_slack(client, payload)

    assert response.status_code == 400
    assert b"NUL characters" in response.content
    assert not InboundMessage.objects.exists()
